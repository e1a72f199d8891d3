// chorus::runtime: the code of chorus compiled once instead of in every file
// that includes it: the rendezvous store's Boost.Asio client and server
// (bootstrap/store_open.hpp) and the PMIx client (bootstrap/pmix.hpp):
// linking this library keeps Asio and PMIx's headers out of every
// translation unit of a user's program.
#if !defined(CHORUS_SEPARATE_RUNTIME)
#error "build src/runtime.cpp through the chorus::runtime target, which defines CHORUS_SEPARATE_RUNTIME"
#endif

#include <chorus/bootstrap/pmix_impl.hpp>
#include <chorus/bootstrap/store_open_impl.hpp>

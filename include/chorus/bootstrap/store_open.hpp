// Opening the rendezvous store over TCP: host one (rank 0 of a job started
// by a cluster launcher, chorus-run, run_threads) or join one.
//
// Linked with chorus::runtime (which defines CHORUS_SEPARATE_RUNTIME), this
// header only declares: the Boost.Asio code is compiled once, in the
// library, and a file that calls init() does not parse Asio. Header-only
// (chorus::chorus alone), the definitions follow inline and every file that
// includes this header compiles Asio; see the README, "Compile time".
#pragma once

#include <chorus/bootstrap/store.hpp>

#include <memory>

#if defined(CHORUS_SEPARATE_RUNTIME)
#define CHORUS_RUNTIME_API
#else
#define CHORUS_RUNTIME_API inline
#endif

namespace chorus::store {

// Serves a store on its own thread until the returned object is destroyed.
CHORUS_RUNTIME_API std::unique_ptr<host> host_store(server_options options);

// Connects (retrying until the timeout: the host may start later) and
// authenticates with the job's token.
CHORUS_RUNTIME_API std::unique_ptr<connection> join_store(client_options options);

}  // namespace chorus::store

#if !defined(CHORUS_SEPARATE_RUNTIME)
#include <chorus/bootstrap/store_open_impl.hpp>
#endif

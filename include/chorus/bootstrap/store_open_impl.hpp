// The definitions behind store_open.hpp: inline in header-only use,
// compiled once into chorus::runtime (src/runtime.cpp) otherwise.
#pragma once

#include <chorus/bootstrap/store_client.hpp>
#include <chorus/bootstrap/store_open.hpp>
#include <chorus/bootstrap/store_server.hpp>

namespace chorus::store {

CHORUS_RUNTIME_API std::unique_ptr<host> host_store(server_options options) {
  return std::make_unique<server>(std::move(options));
}

CHORUS_RUNTIME_API std::unique_ptr<connection> join_store(client_options options) {
  return std::make_unique<client>(std::move(options));
}

}  // namespace chorus::store

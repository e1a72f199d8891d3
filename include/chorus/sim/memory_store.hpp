// The rendezvous store of a simulated job: one table in memory that every
// simulated rank reads and writes (they are actors of one process). A
// wait looks again every poll_step of simulated time. What collectives ask
// of a store (a split's communicator id) works as in a real job.
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/simgrid_transport.hpp>

#include <simgrid/s4u.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace chorus::sim {

struct shared_table {
  std::map<std::string, std::string, std::less<>> values;
};

class memory_store final : public store::connection {
 public:
  memory_store(std::shared_ptr<shared_table> table, std::chrono::milliseconds timeout, int rank)
      : table_(std::move(table)), timeout_(timeout), rank_(rank) {}
  std::chrono::milliseconds timeout() const noexcept override { return timeout_; }
  void set(std::string_view key, std::string_view value) override {
    table_->values.insert_or_assign(std::string(key), std::string(value));
  }
  std::optional<std::string> get(std::string_view key) override {
    const auto found = table_->values.find(key);
    if (found == table_->values.end()) return std::nullopt;
    return found->second;
  }
  std::string wait(std::string_view key, std::chrono::milliseconds timeout) override {
    const double give_up = simgrid::s4u::Engine::get_clock() + std::chrono::duration<double>(timeout).count();
    for (;;) {
      if (auto value = get(key)) return *value;
      if (simgrid::s4u::Engine::get_clock() >= give_up)
        throw error(errc::timeout, "key did not appear within " + std::to_string(timeout.count()) + " ms (simulated)",
                    {rank_, -1, "store wait '" + std::string(key) + "'"});
      simgrid::s4u::this_actor::sleep_for(simgrid_transport::poll_step);
    }
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    const std::int64_t value = std::stoll(get(key).value_or("0")) + delta;
    set(key, std::to_string(value));
    return value;
  }
  void join_as(int) override {}
  void leave() noexcept override {}

 private:
  std::shared_ptr<shared_table> table_;
  std::chrono::milliseconds timeout_;
  int rank_;
};

}  // namespace chorus::sim

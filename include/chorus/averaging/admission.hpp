// Workers that join a running job (a process started with CHORUS_JOIN=1,
// comm/connect.hpp) enter an open asynchronous scheme here; the scheme's
// ranks admit them without stopping.
//
// The protocol, the same for every scheme that admits:
//  1. When a scheme opens, rank 0 of its group writes the group (its id and
//     its members' transport ranks) to the store under the scheme's name;
//     a joiner finds the last one opened under that name (open()).
//  2. The joiner builds the same group with itself last (enter()) and
//     sends its introduction (process identity and worker address) to its
//     contacts, the ranks that admit it (the centre's server, every
//     shard's server), on hello_tag (introduce()).
//  3. A contact's serving side keeps a standing receive for introductions
//     (desk): it makes the joiner reachable, grows its own view of the
//     group (communicator::with) and sends a welcome on welcome_tag (the
//     centre, its shard), from which the joiner starts.
//  4. The joiner counts as a member from its first message after the
//     welcome. Until then a contact forgets it without a trace if it dies
//     (under any failure policy), so a joiner that dies during admission is
//     invisible to the job; the contact's death is an error for the joiner.
// Only a contact's serving side grows: the rest of the job never addresses
// the joiner. A joiner that arrives after its contact finished is not
// answered: its wait for the welcome times out, an error for it alone.
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::averaging::admission {

inline constexpr int hello_tag = 4000;
inline constexpr int welcome_tag = 4001;
inline constexpr std::size_t introduction_limit = 64 * 1024;  // an address of every UCX transport fits

inline std::string record_key(std::string_view scheme) { return "chorus/open/" + std::string(scheme); }

// Step 1, on every rank of a scheme's new group (rank 0 writes).
template <class Communicator>
void open(const Communicator& group, std::string_view scheme) {
  if (group.rank() != 0 || group.store() == nullptr) return;
  std::string record = std::to_string(group.id());
  for (int member : group.world_ranks()) (record += ' ') += std::to_string(member);  // appended: GCC 12 -Wrestrict
  group.store()->set(record_key(scheme), record);
}

// Step 2: the group of the last `scheme` opened, with this process last.
template <class Communicator>
Communicator enter(const Communicator& world, std::string_view scheme) {
  if (world.store() == nullptr)
    throw error(errc::invalid_argument, std::string(scheme) + ": joining needs the job's store",
                {world.transport().rank(), -1, "join"});
  const std::string record = world.store()->wait(record_key(scheme), world.timeout());
  std::vector<long long> numbers;
  for (const char *at = record.data(), *end = at + record.size(); at < end;) {
    long long value = 0;
    const auto [next, problem] = std::from_chars(at, end, value);
    if (problem != std::errc()) break;
    numbers.push_back(value);
    at = next + (next < end ? 1 : 0);
  }
  if (numbers.size() < 2)
    throw error(errc::mismatch, std::string(scheme) + ": the store's record of the open scheme does not parse",
                {world.transport().rank(), -1, "join"});
  return world.joined_group(static_cast<std::uint32_t>(numbers.front()),
                            std::vector<int>(numbers.begin() + 1, numbers.end()));
}

// Step 2: the joiner's introduction, to one contact (a rank of `group`).
template <class Communicator>
typename Communicator::request introduce(Communicator& group, int contact) {
  return group.isend(group.introduction(), contact, hello_tag);
}

// Steps 2 and 3 on the joiner's side: `welcomes`, the receives it posted
// for its contacts' welcomes, then its introduction to each contact, all
// waited for (bounded by the timeout: a contact's death is an error here);
// the welcomes come back completed, for the bytes each received.
template <class Communicator>
void welcomed(Communicator& group, std::span<typename Communicator::request> welcomes, const std::vector<int>& contacts,
              std::string_view waiting) {
  std::vector<typename Communicator::request> all;
  for (auto& welcome : welcomes) all.push_back(std::move(welcome));
  for (int contact : contacts) all.push_back(introduce(group, contact));
  group.wait_all(all, waiting);
  std::move(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(welcomes.size()), welcomes.begin());
}

// Step 3: a contact's standing receive for introductions, served by its
// serving side only (one thread at a time).
template <class Communicator>
class desk {
 public:
  void open(Communicator& group) {
    buffer_.resize(introduction_limit);
    post(group);
  }
  bool is_open() const noexcept { return !buffer_.empty(); }

  // The transport rank of a joiner whose introduction arrived, now
  // reachable from this process; none if none arrived. A joiner that
  // cannot be reached or has died since is passed over: its failure is its own.
  std::optional<int> next(Communicator& group) {
    while (is_open() && group.test(receive_)) {
      const int joiner = receive_.peer();
      const std::vector<std::byte> introduction(
          buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(receive_.received_bytes()));
      post(group);
      try {
        group.admit(joiner, introduction);
        if (!group.transport().peer_gone_now(joiner)) return joiner;
      } catch (const error&) {  // unreachable: passed over
      }
    }
    return std::nullopt;
  }

 private:
  void post(Communicator& group) { receive_ = group.irecv_any(std::span(buffer_), hello_tag); }

  std::vector<std::byte> buffer_;
  typename Communicator::request receive_;
};

// A gossip group as its rank 0 describes it in a welcome (GoSGD): the
// collectives' next sequence number, the members (transport ranks, the
// joiner not among them: it comes last) and whether each is gone, and the
// members of the collectives, as 64-bit words:
//   sequence | n | (rank, gone) x n | m | rank x m
// parse() takes the words a joiner received and checks them: whole, every
// rank one of the job's [0, capacity) other than the joiner's own, none
// twice; anything else is a mismatch naming rank 0, never a group built
// on ranks that do not exist (tests/fuzz/scheme_fuzz.cpp).
struct group_description {
  std::uint32_t sequence = 1;
  std::vector<int> members;
  std::vector<int> gone;  // the members that are dead, departed or leaving
  std::vector<int> collective;

  std::vector<std::int64_t> words() const {
    std::vector<std::int64_t> out{sequence, static_cast<std::int64_t>(members.size())};
    for (int member : members) {
      out.push_back(member);
      out.push_back(std::find(gone.begin(), gone.end(), member) != gone.end() ? 1 : 0);
    }
    out.push_back(static_cast<std::int64_t>(collective.size()));
    out.insert(out.end(), collective.begin(), collective.end());
    return out;
  }

  static group_description parse(std::span<const std::int64_t> words, int capacity, int joiner,
                                 const error_context& where) {
    const auto bad = [&](const std::string& what) { return error(errc::mismatch, "rank 0's welcome " + what, where); };
    std::size_t next = 0;
    const auto word = [&] {
      if (next >= words.size()) throw bad("is cut short");
      return words[next++];
    };
    const auto rank = [&](std::vector<int>& into) {
      const std::int64_t value = word();
      if (value < 0 || value >= capacity || value == joiner || std::find(into.begin(), into.end(), value) != into.end())
        throw bad("names rank " + std::to_string(value) + ", not a rank of the job's " + std::to_string(capacity) +
                  " other than this joiner, once");
      into.push_back(static_cast<int>(value));
    };
    const auto count = [&] {
      const std::int64_t value = word();
      if (value < 0 || value >= capacity) throw bad("counts " + std::to_string(value) + " members");
      return static_cast<int>(value);
    };
    group_description described;
    const std::int64_t sequence = word();
    if (sequence < 0 || sequence > std::numeric_limits<std::uint32_t>::max())
      throw bad("carries the sequence number " + std::to_string(sequence));
    described.sequence = static_cast<std::uint32_t>(sequence);
    for (int k = count(); k > 0; --k) {
      rank(described.members);
      const std::int64_t gone = word();
      if (gone != 0 && gone != 1) throw bad("marks a member gone with " + std::to_string(gone));
      if (gone == 1) described.gone.push_back(described.members.back());
    }
    if (described.members.empty()) throw bad("names no member");
    for (int k = count(); k > 0; --k) rank(described.collective);
    if (next != words.size()) throw bad("carries " + std::to_string(words.size() - next) + " words more");
    return described;
  }
};

// Step 4: the rank of `group` that `failure` names, if that peer is gone
// (the caller forgets it without a trace when it is still being admitted).
template <class Communicator>
std::optional<int> gone_member(const Communicator& group, const error& failure) {
  for (int rank = 0; rank < group.size(); ++rank)
    if (group.world_rank(rank) == failure.peer() && rank != group.rank() && group.peer_gone(rank)) return rank;
  return std::nullopt;
}

}  // namespace chorus::averaging::admission

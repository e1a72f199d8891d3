// libFuzzer target for the rendezvous store: the frame parser, and server
// sessions fed arbitrary byte streams (bootstrap/store_session.hpp, the
// exact logic the Asio server runs). scripts/fuzz builds and runs it.
//
// Input layout: byte 0 picks how the stream is cut into reads; the rest is
// the stream. Two sessions share one table: the first starts greeted (so
// the fuzzer reaches SET/GET/WAIT/ADD without having to guess the token),
// the second starts cold; reads alternate between them (JOIN and LEAVE
// included: a joined session that ends without LEAVE fails the waits). Checked on every
// step, beyond "no crash, no sanitizer report":
// - every reply is a well-formed frame with a reply opcode;
// - a closed session says nothing more;
// - a session never buffers more than one frame's limit;
// - when every session has ended, nobody is left waiting in the table.
#include <chorus/bootstrap/store_session.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

namespace store = chorus::store;

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

void check_replies(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    require(bytes.size() >= 5);
    const std::uint32_t length = store::read_u32(bytes.first<4>());
    require(length >= 1 && bytes.size() >= 4 + std::size_t{length});
    store::frame_reader frame(bytes.subspan(4, length));
    const auto code = static_cast<std::uint8_t>(frame.code());
    require(code >= static_cast<std::uint8_t>(store::opcode::reply_ok) &&
            code <= static_cast<std::uint8_t>(store::opcode::reply_peer_failure));
    bytes = bytes.subspan(4 + length);
  }
}

// A joined session ended without LEAVE: the waits its failure answers.
void deliver_failures(std::vector<std::unique_ptr<store::session_protocol>>& sessions,
                      const std::vector<store::session_id>& waiting) {
  for (store::session_id id : waiting) {
    require(id >= 1 && id <= sessions.size());
    check_replies(sessions[id - 1]->deliver_failure());
  }
}

// The parser alone, on the whole input as a body.
void parse_as_body(std::span<const std::byte> body) {
  try {
    store::frame_reader frame(body);
    frame.code();
    frame.string(1024, "key");
    frame.u64();
    frame.u32();
    frame.expect_end();
  } catch (const store::protocol_error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  parse_as_body({bytes + 1, size - 1});

  store::server_options options;
  options.token = "token";
  options.limits.max_value_bytes = 4096;  // small limits: the fuzzer reaches them
  options.limits.max_key_bytes = 64;
  options.limits.max_token_bytes = 32;
  store::table values;
  std::vector<std::unique_ptr<store::session_protocol>> sessions;
  for (store::session_id id = 1; id <= 2; ++id)
    sessions.push_back(std::make_unique<store::session_protocol>(values, options, id));
  const auto hello =
      store::frame_writer(store::opcode::hello).put_u32(store::protocol_version).put_string("token").finish();
  check_replies(sessions[0]->feed(hello).send);

  const std::size_t cut = (static_cast<std::size_t>(data[0]) % 31) + 1;
  std::span<const std::byte> stream(bytes + 1, size - 1);
  for (std::size_t turn = 0; !stream.empty(); ++turn) {
    store::session_protocol& session = *sessions[turn % 2];
    const std::size_t count = std::min(stream.size(), cut + (turn * 7) % cut);
    const bool was_closed = session.closed();
    store::session_protocol::effects effects = session.feed(stream.first(count));
    stream = stream.subspan(count);
    if (was_closed)
      require(effects.send.empty() && !effects.close && effects.woken.empty() && effects.failed_waits.empty());
    check_replies(effects.send);
    require(!session.partial() || !session.closed());
    for (store::session_id woken : effects.woken) {
      const std::string* value = values.find(effects.woken_key);
      require(value != nullptr && woken >= 1 && woken <= 2);
      check_replies(sessions[woken - 1]->deliver(effects.woken_key, *value));
    }
    deliver_failures(sessions, effects.failed_waits);
    if (turn % 5 == 4) check_replies(sessions[(turn / 5) % 2]->wait_expired());
  }
  for (auto& session : sessions) deliver_failures(sessions, session->end());
  require(values.waiting_keys() == 0);
  return 0;
}

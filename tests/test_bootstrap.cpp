// The rendezvous store (protocol, token, limits, timeouts) and rank
// discovery from the environment.
#include <chorus/bootstrap/environment.hpp>
#include <chorus/bootstrap/store_client.hpp>
#include <chorus/bootstrap/store_server.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <doctest/doctest.h>

#include "expect_error.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace store = chorus::store;
using steady = std::chrono::steady_clock;

namespace {

store::server_options server_settings(std::string token = "secret") {
  store::server_options options;
  options.token = std::move(token);
  options.hello_timeout = 500ms;
  return options;
}

store::client_options client_settings(const store::server& host, std::string token = "secret") {
  store::client_options options;
  options.port = host.port();
  options.token = std::move(token);
  options.timeout = 3000ms;
  return options;
}

// A bare TCP connection that speaks raw bytes, to send what a client never would.
class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port) : socket_(io_) {
    boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), port);
    socket_.connect(endpoint);
  }
  void write(const std::vector<std::byte>& bytes) { boost::asio::write(socket_, boost::asio::buffer(bytes)); }
  void hello(const std::string& token) {
    write(store::frame_writer(store::opcode::hello).put_u32(store::protocol_version).put_string(token).finish());
    CHECK(read_reply().first == store::opcode::reply_ok);
  }
  // Reads one reply frame: its opcode and, for errors and values, its text.
  std::pair<store::opcode, std::string> read_reply() {
    std::array<std::byte, 4> header{};
    boost::asio::read(socket_, boost::asio::buffer(header));
    std::vector<std::byte> body(store::read_u32(header));
    boost::asio::read(socket_, boost::asio::buffer(body));
    store::frame_reader frame(body);
    const store::opcode code = frame.code();
    std::string text;
    if (code == store::opcode::reply_error || code == store::opcode::reply_value) text = frame.string(1u << 30, "text");
    return {code, text};
  }
  bool closed_by_peer() {
    std::byte byte{};
    boost::system::error_code failure;
    boost::asio::read(socket_, boost::asio::buffer(&byte, 1), failure);
    return failure == boost::asio::error::eof || failure == boost::asio::error::connection_reset;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> bytes;
  for (int value : values) bytes.push_back(static_cast<std::byte>(value));
  return bytes;
}

void expect_refusal(raw_connection& connection, const std::string& fragment) {
  const auto [code, text] = connection.read_reply();
  CHECK(code == store::opcode::reply_error);
  CAPTURE(text);
  CHECK(text.find(fragment) != std::string::npos);
  CHECK(connection.closed_by_peer());
}

}  // namespace

TEST_CASE("store: set, get, missing keys and binary values") {
  store::server host(server_settings());
  store::client client(client_settings(host));
  CHECK_FALSE(client.get("absent"));
  client.set("alpha", "one");
  CHECK(client.get("alpha") == "one");
  client.set("alpha", "two");
  CHECK(client.get("alpha") == "two");
  const std::string binary("\0\xff\x01zero", 7);
  client.set("binary", binary);
  CHECK(client.get("binary") == binary);
  const std::string large(1u << 20, 'x');
  client.set("large", large);
  CHECK(client.get("large") == large);
  client.set("empty", "");
  CHECK(client.get("empty") == "");
}

TEST_CASE("store: wait returns once another client sets the key") {
  store::server host(server_settings());
  store::client waiter(client_settings(host));
  std::thread setter([&] {
    store::client other(client_settings(host));
    std::this_thread::sleep_for(100ms);
    other.set("late", "here");
  });
  CHECK(waiter.wait("late", 5000ms) == "here");
  setter.join();
  CHECK(waiter.wait("late", 10ms) == "here");  // already present: immediate
}

TEST_CASE("store: wait on a key that never comes is a timeout error") {
  store::server host(server_settings());
  store::client client(client_settings(host));
  const auto start = steady::now();
  chorus_test::expect_error([&] { client.wait("never", 200ms); }, chorus::errc::timeout, "'never'");
  CHECK(steady::now() - start < 3s);
  client.set("after", "ok");  // the connection is still usable
  CHECK(client.get("after") == "ok");
}

TEST_CASE("store: add is atomic across concurrent clients") {
  store::server host(server_settings());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      store::client client(client_settings(host));
      for (int i = 0; i < 100; ++i) client.add("counter", 1);
    });
  for (auto& thread : threads) thread.join();
  store::client client(client_settings(host));
  CHECK(client.add("counter", 0) == 400);
  CHECK(client.add("counter", -401) == -1);
  client.set("text", "abc");
  CHECK_THROWS_AS(client.add("text", 1), chorus::error);
}

TEST_CASE("store: a client with the wrong token is refused") {
  store::server host(server_settings("right"));
  chorus_test::expect_error([&] { store::client intruder(client_settings(host, "wrong")); },
                            chorus::errc::invalid_argument, "bad token");
  store::client member(client_settings(host, "right"));
  member.set("k", "v");
  CHECK(member.get("k") == "v");
}

TEST_CASE("store: malformed frames get an error reply, the connection closes, the server lives on") {
  store::server host(server_settings());
  SUBCASE("empty body") {
    raw_connection connection(host.port());
    connection.write(bytes_of({0, 0, 0, 0}));
    expect_refusal(connection, "empty body");
  }
  SUBCASE("frame longer than the limit") {
    raw_connection connection(host.port());
    connection.write(bytes_of({0xff, 0xff, 0xff, 0x7f}));
    expect_refusal(connection, "exceeds the limit");
  }
  SUBCASE("request before HELLO") {
    raw_connection connection(host.port());
    connection.write(store::frame_writer(store::opcode::get).put_string("k").finish());
    expect_refusal(connection, "expected HELLO first");
  }
  SUBCASE("unknown opcode") {
    raw_connection connection(host.port());
    connection.hello("secret");
    connection.write(bytes_of({1, 0, 0, 0, 42}));
    expect_refusal(connection, "unknown opcode 42");
  }
  SUBCASE("string length beyond the body") {
    raw_connection connection(host.port());
    connection.hello("secret");
    connection.write(bytes_of({5, 0, 0, 0, 3, 9, 0, 0, 0}));  // GET, key of 9 bytes, none sent
    expect_refusal(connection, "body too short");
  }
  SUBCASE("trailing bytes") {
    raw_connection connection(host.port());
    connection.hello("secret");
    auto frame = store::frame_writer(store::opcode::get).put_string("k").put_u8(7).finish();
    connection.write(frame);
    expect_refusal(connection, "trailing");
  }
  SUBCASE("wrong protocol version") {
    raw_connection connection(host.port());
    connection.write(store::frame_writer(store::opcode::hello).put_u32(99).put_string("secret").finish());
    expect_refusal(connection, "protocol version 99");
  }
  store::client healthy(client_settings(host));
  healthy.set("still", "serving");
  CHECK(healthy.get("still") == "serving");
}

TEST_CASE("store: oversized values are rejected on both sides") {
  store::server_options small = server_settings();
  small.limits.max_value_bytes = 16;
  store::server host(small);
  SUBCASE("by the client before sending") {
    store::client_options options = client_settings(host);
    options.limits.max_value_bytes = 16;
    store::client client(options);
    chorus_test::expect_error([&] { client.set("k", std::string(17, 'v')); }, chorus::errc::invalid_argument,
                              "17 bytes exceeds the store limit of 16");
    client.set("k", std::string(16, 'v'));
    CHECK(client.get("k") == std::string(16, 'v'));
  }
  SUBCASE("by the server, from a client that allows more") {
    store::client client(client_settings(host));
    chorus_test::expect_error([&] { client.set("k", std::string(100, 'v')); }, chorus::errc::invalid_argument,
                              "value of 100 bytes exceeds the limit of 16");
  }
}

TEST_CASE("store: a silent connection is closed after the hello timeout") {
  store::server host(server_settings());
  raw_connection silent(host.port());
  const auto start = steady::now();
  CHECK(silent.closed_by_peer());
  CHECK(steady::now() - start < 5s);
}

TEST_CASE("store: connecting where no store listens times out with a clear error") {
  std::uint16_t port = 0;
  {
    store::server gone(server_settings());
    port = gone.port();
  }
  store::client_options options;
  options.port = port;
  options.timeout = 300ms;
  const auto start = steady::now();
  chorus_test::expect_error([&] { store::client client(options); }, chorus::errc::timeout, "no store answered");
  CHECK(steady::now() - start < 5s);
}

TEST_CASE("store: the host can wait for its clients to leave") {
  store::server host(server_settings());
  auto client = std::make_unique<store::client>(client_settings(host));
  client->set("k", "v");
  CHECK_FALSE(host.wait_until_no_clients(50ms));
  client.reset();
  CHECK(host.wait_until_no_clients(3000ms));
}

namespace {

const char* const launch_variables[] = {
    "CHORUS_RANK", "CHORUS_SIZE", "CHORUS_ADDR", "CHORUS_TOKEN", "CHORUS_LAUNCHER", "CHORUS_LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"};

struct clean_environment {
  clean_environment() {
    for (const char* name : launch_variables) ::unsetenv(name);
  }
  ~clean_environment() {
    for (const char* name : launch_variables) ::unsetenv(name);
  }
};

}  // namespace

TEST_CASE("discovery: no variables is a single-rank job") {
  clean_environment scope;
  const auto info = chorus::bootstrap::discover();
  CHECK(info.rank == 0);
  CHECK(info.size == 1);
  CHECK_FALSE(info.store);
}

TEST_CASE("discovery: each launcher's variables, first match wins") {
  clean_environment scope;
  ::setenv("CHORUS_ADDR", "10.1.2.3:29500", 1);
  SUBCASE("chorus") {
    ::setenv("CHORUS_RANK", "2", 1);
    ::setenv("CHORUS_SIZE", "5", 1);
    ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);  // ignored: CHORUS_* come first
    ::setenv("OMPI_COMM_WORLD_SIZE", "9", 1);
    ::setenv("CHORUS_LAUNCHER", "chorus-run", 1);
    const auto info = chorus::bootstrap::discover();
    CHECK(info.rank == 2);
    CHECK(info.size == 5);
    CHECK(info.launcher_hosts_store);
  }
  SUBCASE("open mpi") {
    ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    const auto info = chorus::bootstrap::discover();
    CHECK(info.rank == 3);
    CHECK(info.size == 4);
    CHECK(info.local_size == 2);
    CHECK_FALSE(info.launcher_hosts_store);
  }
  SUBCASE("pmi") {
    ::setenv("PMI_RANK", "1", 1);
    ::setenv("PMI_SIZE", "7", 1);
    const auto info = chorus::bootstrap::discover();
    CHECK(info.rank == 1);
    CHECK(info.size == 7);
    CHECK(info.local_size == 7);
  }
  SUBCASE("slurm") {
    ::setenv("SLURM_PROCID", "6", 1);
    ::setenv("SLURM_NTASKS", "8", 1);
    const auto info = chorus::bootstrap::discover();
    CHECK(info.rank == 6);
    CHECK(info.size == 8);
    CHECK(info.store->host == "10.1.2.3");
    CHECK(info.store->port == 29500);
  }
}

TEST_CASE("discovery: inconsistent or missing variables are clear errors") {
  clean_environment scope;
  SUBCASE("rank without size") {
    ::setenv("CHORUS_RANK", "1", 1);
    CHECK_THROWS_WITH_AS(chorus::bootstrap::discover(),
                         "chorus invalid_argument: CHORUS_RANK and CHORUS_SIZE must be set together",
                         chorus::error);
  }
  SUBCASE("rank not below size") {
    ::setenv("PMI_RANK", "4", 1);
    ::setenv("PMI_SIZE", "4", 1);
    CHECK_THROWS_AS(chorus::bootstrap::discover(), chorus::error);
  }
  SUBCASE("multi-rank without an address") {
    ::setenv("SLURM_PROCID", "0", 1);
    ::setenv("SLURM_NTASKS", "2", 1);
    chorus_test::expect_error([] { chorus::bootstrap::discover(); }, chorus::errc::invalid_argument,
                              "CHORUS_ADDR is not set");
  }
  SUBCASE("not a number") {
    ::setenv("CHORUS_RANK", "zero", 1);
    ::setenv("CHORUS_SIZE", "2", 1);
    CHECK_THROWS_AS(chorus::bootstrap::discover(), chorus::error);
  }
}

TEST_CASE("discovery: rendezvous addresses") {
  using chorus::bootstrap::parse_address;
  CHECK(parse_address("node7:1234").host == "node7");
  CHECK(parse_address("[::1]:80").host == "::1");
  CHECK(parse_address("[::1]:80").port == 80);
  CHECK_THROWS_AS(parse_address("node7"), chorus::error);
  CHECK_THROWS_AS(parse_address("node7:0"), chorus::error);
  CHECK_THROWS_AS(parse_address("node7:65536"), chorus::error);
  CHECK_THROWS_AS(parse_address(":80"), chorus::error);
  CHECK_THROWS_AS(parse_address("[::1:80"), chorus::error);
}

// chorus-run: environment, output prefixing, failure propagation, timeouts.
// Runs the real launcher binary on launcher_probe and inspects what it did.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#ifndef CHORUS_RUN_PATH
#error "CHORUS_RUN_PATH must name the chorus-run binary"
#endif

namespace {

struct outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string slurp(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

outcome launch(const std::string& arguments) {
  const std::string base = "/tmp/chorus_launcher_test_" + std::to_string(::getpid());
  const std::string command = std::string(CHORUS_RUN_PATH) + " " + arguments + " >" + base + ".out 2>" + base + ".err";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  outcome result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = slurp(base + ".out");
  result.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return result;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

const std::string probe = CHORUS_PROBE_PATH;

}  // namespace

TEST_CASE("every rank runs, its lines prefixed with its rank on the right stream") {
  const outcome result = launch("-n 3 -- " + probe + " hello");
  CHECK(result.exit_code == 0);
  CAPTURE(result.out);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    CHECK(contains(result.out, "[" + r + "] hello from " + r + " of 3\n"));
    CHECK(contains(result.err, "[" + r + "] complaint from " + r + "\n"));
    CHECK_FALSE(contains(result.out, "complaint"));
  }
}

TEST_CASE("the launcher sets rank, size, address and one token for the whole job") {
  const outcome result = launch("-n 2 " + probe + " env");
  REQUIRE(result.exit_code == 0);
  CAPTURE(result.out);
  CHECK(contains(result.out, "[0] rank=0 size=2 local_rank=0 local_size=2 addr=127.0.0.1:"));
  CHECK(contains(result.out, "[1] rank=1 size=2 local_rank=1 local_size=2 addr=127.0.0.1:"));
  CHECK(contains(result.out, "launcher=chorus-run"));
  std::set<std::string> tokens;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("token=");
    REQUIRE(at != std::string::npos);
    tokens.insert(line.substr(at + 6, line.find(' ', at) - at - 6));
  }
  CHECK(tokens.size() == 1);
  CHECK(tokens.begin()->size() >= 16);
}

TEST_CASE("a last line without a newline is still delivered, prefixed") {
  const outcome result = launch("-n 2 " + probe + " partial");
  CHECK(result.exit_code == 0);
  CHECK(contains(result.out, "[0] no newline from 0\n"));
  CHECK(contains(result.out, "[1] no newline from 1\n"));
}

TEST_CASE("the first failing exit code ends the job and is the launcher's exit code") {
  const outcome result = launch("-n 4 " + probe + " fail 2 7");
  CHECK(result.exit_code == 7);
  CHECK(result.seconds < 20);  // the other ranks sleep for a minute unless ended
  CHECK(contains(result.err, "rank 2 exited with code 7"));
}

TEST_CASE("a rank killed by a signal ends the job with 128 + signal") {
  const outcome result = launch("-n 3 " + probe + " kill 0");
  CHECK(result.exit_code == 128 + 9);
  CHECK(result.seconds < 20);
  CHECK(contains(result.err, "rank 0 was killed by signal 9"));
}

TEST_CASE("--timeout ends every rank with exit code 124") {
  const outcome result = launch("-n 2 --timeout 1 " + probe + " sleep");
  CHECK(result.exit_code == 124);
  CHECK(result.seconds < 20);
  CHECK(contains(result.err, "timeout after 1000 ms"));
}

TEST_CASE("usage errors and programs that cannot start") {
  CHECK(launch(probe + " hello").exit_code == 2);            // no -n
  CHECK(launch("-n 0 " + probe + " hello").exit_code == 2);  // bad count
  CHECK(launch("-n 2 --bogus " + probe).exit_code == 2);
  const outcome missing = launch("-n 2 /nonexistent/program");
  CHECK(missing.exit_code == 127);
  CHECK(contains(missing.err, "cannot start '/nonexistent/program'"));
}

namespace {

// A port nobody listens on right now (bind to 0, read it, close).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Starts `ranks` processes the way a cluster launcher would: only the given
// variables, no chorus-run; rank 0 hosts the store at CHORUS_ADDR.
int launch_like_a_cluster(int ranks, const std::string& rank_variable, const std::string& size_variable) {
  std::string script = "pids=''; ";
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  for (int rank = ranks - 1; rank >= 0; --rank)  // rank 0 last: the others must wait for its store
    script += "env " + rank_variable + "=" + std::to_string(rank) + " " + size_variable + "=" + std::to_string(ranks) +
              " CHORUS_ADDR=" + address + " CHORUS_TOKEN=t0k3n CHORUS_TIMEOUT=60 " + CHORUS_P2P_PATH +
              " >/dev/null & pids=\"$pids $!\"; ";
  script += "status=0; for p in $pids; do wait $p || status=1; done; exit $status";
  const int status = std::system(("timeout 120 sh -c '" + script + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("without chorus-run: rank 0 hosts the store, ranks come from MPI, PMI or Slurm variables") {
  CHECK(launch_like_a_cluster(3, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE") == 0);
  CHECK(launch_like_a_cluster(4, "PMI_RANK", "PMI_SIZE") == 0);
  CHECK(launch_like_a_cluster(2, "SLURM_PROCID", "SLURM_NTASKS") == 0);
  CHECK(launch_like_a_cluster(5, "CHORUS_RANK", "CHORUS_SIZE") == 0);
}

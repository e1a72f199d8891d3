// A program for the launcher's tests; it does not use the transport.
//   hello             print a line on stdout and one on stderr
//   env               print the CHORUS_* variables the launcher set
//   partial           print a line without its newline
//   fail RANK CODE    RANK exits with CODE after 100 ms, the others sleep
//   kill RANK         RANK kills itself with SIGKILL, the others sleep
//   sleep             everybody sleeps for a minute
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

const char* env_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

void sleep_a_minute() { std::this_thread::sleep_for(std::chrono::seconds(60)); }

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int rank = env_int("CHORUS_RANK");
  const int size = env_int("CHORUS_SIZE");
  if (mode == "hello") {
    std::printf("hello from %d of %d\n", rank, size);
    std::fprintf(stderr, "complaint from %d\n", rank);
    return 0;
  }
  if (mode == "env") {
    std::printf("rank=%d size=%d local_rank=%s local_size=%s addr=%s token=%s launcher=%s\n", rank, size,
                env_text("CHORUS_LOCAL_RANK"), env_text("CHORUS_LOCAL_SIZE"), env_text("CHORUS_ADDR"),
                env_text("CHORUS_TOKEN"), env_text("CHORUS_LAUNCHER"));
    return 0;
  }
  if (mode == "partial") {
    std::printf("no newline from %d", rank);
    return 0;
  }
  if ((mode == "fail" && argc == 4) || (mode == "kill" && argc == 3)) {
    if (rank == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (mode == "kill") std::raise(SIGKILL);
      return std::atoi(argv[3]);
    }
    sleep_a_minute();
    return 0;
  }
  if (mode == "sleep") {
    sleep_a_minute();
    return 0;
  }
  std::fprintf(stderr, "launcher_probe: unknown mode '%s'\n", mode.c_str());
  return 2;
}

// chorus-run: start N local ranks of a chorus program.
//
//   chorus-run -n N [--timeout SECONDS] [--stall-after SECONDS] [--bind HOST]
//              [--port PORT] [--no-prefix] [--keep-going] [--join K[@SECONDS]]
//              [--job-file PATH] [--] program [args...]
//
// It hosts the rendezvous store, spawns N processes with CHORUS_RANK,
// CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE, CHORUS_ADDR, CHORUS_TOKEN
// and CHORUS_LAUNCHER set, prefixes each output line with "[rank] ", and
// exits with the first failing rank's exit code (128+signal if it was
// killed), after ending every other rank. --timeout ends the whole job with
// exit code 124. SIGINT/SIGTERM to chorus-run are passed to every rank.
// --keep-going is for training that survives a lost worker: a rank killed
// by a signal is reported and the others run on; the job then fails only if
// a rank exits with an error or every rank is lost.
// --join K@SECONDS starts K more processes of the program SECONDS into the
// job with CHORUS_JOIN=1 (no CHORUS_RANK): each joins the running job (its
// rank comes from the store; comm/connect.hpp) and enters its asynchronous
// scheme (averaging/admission.hpp); their lines are prefixed [join k].
// --job-file PATH writes the variables another process needs to join from
// outside (CHORUS_ADDR, CHORUS_TOKEN, CHORUS_SIZE, CHORUS_LAUNCHER), one
// per line, readable by the owner only:
//   env $(cat PATH) CHORUS_JOIN=1 program [args...]
// Flight records (record/journal.hpp): the ranks write them to
// CHORUS_RECORD_DIR (a directory of /tmp made for the job where it is
// unset; removed when the job succeeds). When the job fails (a rank exits
// with an error, --timeout) or no rank finishes a call for --stall-after
// SECONDS, chorus-run asks every running rank for its record (SIGUSR1),
// prints chorus-trace's report of them, then ends the job as above.
// Timelines (record/trace_file.hpp): under CHORUS_TRACE=FILE each rank
// writes its own part beside FILE; chorus-run merges them into FILE
// (chorus-trace merge) when the job ends.
#include <chorus/bootstrap/store_server.hpp>
#include <chorus/bootstrap/token.hpp>
#include <chorus/core/env.hpp>
#include <chorus/record/journal.hpp>
#include <chorus/transport/shared_segment.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

using clock_type = std::chrono::steady_clock;

struct arguments {
  int ranks = 0;
  std::optional<std::chrono::milliseconds> timeout;
  std::string bind_host = "127.0.0.1";
  std::uint16_t port = 0;
  bool prefix = true;
  bool keep_going = false;
  int joiners = 0;
  std::chrono::milliseconds join_after{0};
  std::string job_file;
  std::optional<std::chrono::milliseconds> stall_after;
  std::vector<std::string> command;
};

// An empty problem is --help: the usage on stdout, exit status 0.
[[noreturn]] void usage(const std::string& problem) {
  std::FILE* out = problem.empty() ? stdout : stderr;
  if (!problem.empty()) std::fprintf(out, "chorus-run: %s\n", problem.c_str());
  std::fprintf(out,
               "usage: chorus-run -n N [--timeout SECONDS] [--stall-after SECONDS] [--bind HOST] [--port PORT] "
               "[--no-prefix] [--keep-going] [--join K[@SECONDS]] [--job-file PATH] [--] program [args...]\n"
               "Starts N ranks of the program on this machine, hosts the rendezvous store, prefixes\n"
               "output lines with [rank], and ends the job with the first failing rank's exit code.\n"
               "--keep-going: a rank killed by a signal does not end the others (fault-tolerant training).\n"
               "--stall-after SECONDS: when no rank finishes a call for that long, report what each rank\n"
               "  was doing (its flight record, also printed when the job fails) and end the job.\n"
               "--join K@SECONDS: K more processes join the running job after SECONDS (CHORUS_JOIN=1).\n"
               "--job-file PATH: writes what a process needs to join from outside:\n"
               "  env $(cat PATH) CHORUS_JOIN=1 program [args...]\n"
               "CHORUS_TRACE=FILE: the ranks' timelines, merged into FILE when the job ends.\n");
  std::exit(problem.empty() ? 0 : 2);
}

arguments parse(int argc, char** argv) {
  arguments parsed;
  int i = 1;
  const auto value = [&](std::string_view flag) -> std::string {
    if (i + 1 >= argc) usage(std::string(flag) + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") usage("");
    const std::string_view flag = argv[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag.empty() || flag[0] != '-') break;
    if (flag == "-n" || flag == "--ranks") {
      const auto ranks = chorus::env::parse_integer(value(flag));
      if (!ranks || *ranks < 1 || *ranks > 4096) usage("-n needs a rank count in 1..4096");
      parsed.ranks = static_cast<int>(*ranks);
    } else if (flag == "--timeout") {
      const std::string text = value(flag);
      parsed.timeout = chorus::env::parse_duration(text);
      if (!parsed.timeout || parsed.timeout->count() <= 0) usage("--timeout needs a duration (30, 30s, 2m)");
    } else if (flag == "--stall-after") {
      const std::string text = value(flag);
      parsed.stall_after = chorus::env::parse_duration(text);
      if (!parsed.stall_after || parsed.stall_after->count() <= 0)
        usage("--stall-after needs a duration (30, 30s, 2m)");
    } else if (flag == "--bind") {
      parsed.bind_host = value(flag);
    } else if (flag == "--port") {
      const auto port = chorus::env::parse_integer(value(flag));
      if (!port || *port < 0 || *port > 65535) usage("--port needs 0..65535");
      parsed.port = static_cast<std::uint16_t>(*port);
    } else if (flag == "--no-prefix") {
      parsed.prefix = false;
    } else if (flag == "--keep-going") {
      parsed.keep_going = true;
    } else if (flag == "--join") {
      const std::string text = value(flag);
      const std::size_t at = text.find('@');
      const auto count = chorus::env::parse_integer(std::string_view(text).substr(0, at));
      if (!count || *count < 1 || *count > 4096) usage("--join needs K[@SECONDS] with K in 1..4096");
      parsed.joiners = static_cast<int>(*count);
      if (at != std::string::npos) {
        const auto after = chorus::env::parse_duration(text.substr(at + 1));
        if (!after || after->count() < 0) usage("--join K@SECONDS needs a duration after @ (5, 5s, 500ms)");
        parsed.join_after = *after;
      }
    } else if (flag == "--job-file") {
      parsed.job_file = value(flag);
    } else {
      usage("unknown option " + std::string(flag));
    }
  }
  if (parsed.ranks == 0) usage("-n is required");
  for (; i < argc; ++i) parsed.command.emplace_back(argv[i]);
  if (parsed.command.empty()) usage("no program given");
  return parsed;
}

volatile std::sig_atomic_t forwarded_signal = 0;
void remember_signal(int signal_number) { forwarded_signal = signal_number; }

// One rank's process and its two output pipes.
struct rank_process {
  pid_t pid = -1;
  bool running = false;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  std::string pending[2];
};

class launcher {
 public:
  explicit launcher(arguments parsed) : args_(std::move(parsed)) {}

  int run() {
    const std::string token = chorus::bootstrap::random_token();
    chorus::store::server store({args_.bind_host, args_.port, token, {}, std::chrono::milliseconds(10000)});
    const std::string address = args_.bind_host + ":" + std::to_string(store.port());
    address_ = address;
    token_ = token;
    if (!args_.job_file.empty()) write_job_file();
    prepare_records();
    std::signal(SIGINT, remember_signal);
    std::signal(SIGTERM, remember_signal);
    std::signal(SIGPIPE, SIG_IGN);
    ranks_.resize(static_cast<std::size_t>(args_.ranks));
    for (int rank = 0; rank < args_.ranks; ++rank) {
      if (!spawn(rank, address, token)) {
        finish_with(127);
        terminate_all();
        break;
      }
    }
    if (args_.timeout) deadline_ = clock_type::now() + *args_.timeout;
    if (args_.joiners > 0) join_at_ = clock_type::now() + args_.join_after;
    supervise();
    if (exit_code_.value_or(0) != 0 && !reported_) report_records();
    merge_timelines();
    if (own_record_directory_ && exit_code_.value_or(0) == 0) std::filesystem::remove_all(record_directory_);
    return exit_code_.value_or(0);
  }

 private:
  // What a process needs to join the job: CHORUS_JOIN=1 and these.
  std::vector<std::string> job_variables(const std::string& address, const std::string& token) const {
    std::vector<std::string> variables{"CHORUS_SIZE=" + std::to_string(args_.ranks), "CHORUS_ADDR=" + address,
                                       "CHORUS_TOKEN=" + token, "CHORUS_LAUNCHER=chorus-run"};
    if (own_record_directory_) variables.push_back("CHORUS_RECORD_DIR=" + record_directory_.string());
    return variables;
  }

  // Where the ranks' flight records go: CHORUS_RECORD_DIR, cleared of an
  // earlier job's records, else a directory of our own; none where
  // CHORUS_RECORD=0.
  void prepare_records() {
    if (const auto entries = chorus::env::get("CHORUS_RECORD"); entries && *entries == "0") return;
    if (const auto given = chorus::env::get("CHORUS_RECORD_DIR"); given && !given->empty()) {
      record_directory_ = *given;
      std::error_code ignored;
      for (const auto& file : std::filesystem::directory_iterator(record_directory_, ignored)) {
        const std::string name = file.path().filename().string();
        if (name.starts_with("rank-") && (name.ends_with(".json") || name.ends_with(".progress")))
          std::filesystem::remove(file.path(), ignored);
      }
      return;
    }
    std::string pattern = (std::filesystem::temp_directory_path() / "chorus-run-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return;
    record_directory_ = pattern;
    own_record_directory_ = true;
  }

  std::filesystem::path record_path(int rank, const char* suffix) const {
    return record_directory_ / ("rank-" + std::to_string(rank) + suffix);
  }

  // The job failed or stalled: ask the running ranks for their records
  // (SIGUSR1), then (collect_records) report and end the job.
  void end_job(int code) {
    finish_with(code);
    if (record_directory_.empty() || terminating_ || records_due_) {
      if (!records_due_) terminate_all();
      return;
    }
    asked_at_ = std::filesystem::file_time_type::clock::now();
    for (int rank = 0; rank < processes(); ++rank)
      if (ranks_[static_cast<std::size_t>(rank)].running) kill(ranks_[static_cast<std::size_t>(rank)].pid, SIGUSR1);
    records_due_ = clock_type::now() + std::chrono::seconds(5);
  }

  // Once every rank asked has written its record (or 5 s have passed).
  void collect_records() {
    if (!records_due_) return;
    bool all_written = true;
    for (int rank = 0; rank < args_.ranks; ++rank) {
      if (!ranks_[static_cast<std::size_t>(rank)].running) continue;
      std::error_code missing;
      const auto written = std::filesystem::last_write_time(record_path(rank, ".json"), missing);
      if (missing || written < asked_at_) all_written = false;
    }
    if (!all_written && clock_type::now() < *records_due_) return;
    records_due_.reset();
    report_records();
    terminate_all();
  }

  // chorus-trace's report (installed beside chorus-run) on stderr.
  void report_records() {
    reported_ = true;
    if (record_directory_.empty()) return;
    for (int rank = 0; rank < processes(); ++rank)
      for (int stream = 0; stream < 2; ++stream) flush_partial(rank, stream);
    std::fprintf(stderr, "chorus-run: flight records in %s\n", record_directory_.c_str());
    std::fflush(stderr);
    run_chorus_trace({"report", record_directory_.string()});
  }

  // CHORUS_TRACE=FILE and several ranks: their parts (record::trace_part)
  // merged into FILE, then removed.
  void merge_timelines() {
    const auto file = chorus::env::get("CHORUS_TRACE");
    if (!file || file->empty() || processes() < 2) return;
    const std::filesystem::path target = *file;
    std::vector<std::string> command{"merge"};
    for (int rank = 0; rank < processes(); ++rank) {
      const std::filesystem::path part = chorus::record::trace_part(target, rank);
      if (std::filesystem::exists(part)) command.push_back(part.string());
    }
    if (command.size() == 1) return;
    const std::vector<std::string> parts(command.begin() + 1, command.end());
    command.insert(command.end(), {"-o", target.string()});
    if (run_chorus_trace(command) != 0) return;
    std::error_code ignored;
    for (const std::string& part : parts) std::filesystem::remove(part, ignored);
  }

  // chorus-trace (installed beside chorus-run) with `arguments`, its output
  // on stderr; its exit status, or -1 where it could not run.
  int run_chorus_trace(std::vector<std::string> arguments) {
    std::error_code ignored;
    const std::filesystem::path trace =
        std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path() / "chorus-trace";
    if (!std::filesystem::exists(trace)) return -1;
    arguments.insert(arguments.begin(), trace.string());
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
    pid_t pid = -1;
    int status = -1;
    if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0) {
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    }
    posix_spawn_file_actions_destroy(&actions);
    return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // --stall-after: the ranks' counts of finished calls (rank-<rank>.progress).
  void watch_for_stall() {
    if (!args_.stall_after || record_directory_.empty() || terminating_ || records_due_) return;
    const auto now = clock_type::now();
    std::uint64_t total = 0;
    for (int rank = 0; rank < args_.ranks; ++rank) {
      const int fd = open(record_path(rank, ".progress").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      std::uint64_t count = 0;
      if (pread(fd, &count, sizeof count, 0) == static_cast<ssize_t>(sizeof count)) total += count;
      close(fd);
    }
    if (!progress_seen_ || total != progress_total_) {
      progress_total_ = total;
      progress_seen_ = now;
      return;
    }
    if (now - *progress_seen_ < *args_.stall_after || running_count() == 0) return;
    std::fprintf(stderr, "chorus-run: no rank finished a call for %lld ms; asking the ranks for their flight records\n",
                 static_cast<long long>(args_.stall_after->count()));
    end_job(124);
  }

  void write_job_file() const {
    const int fd = open(args_.job_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) throw std::runtime_error("cannot write --job-file " + args_.job_file + ": " + std::strerror(errno));
    std::string text;
    for (const std::string& entry : job_variables(address_, token_)) text += entry + "\n";
    const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (!written) throw std::runtime_error("cannot write --job-file " + args_.job_file);
  }

  // The caller's environment, with the launcher's own variables replacing
  // any of the same name; a joiner (rank -1) has no rank of its own.
  std::vector<std::string> environment(int rank, const std::string& address, const std::string& token) const {
    const std::string size = std::to_string(args_.ranks);
    std::vector<std::string> own = job_variables(address, token);
    own.push_back("CHORUS_LOCAL_SIZE=" + size);
    if (rank >= 0) {
      own.push_back("CHORUS_RANK=" + std::to_string(rank));
      own.push_back("CHORUS_LOCAL_RANK=" + std::to_string(rank));
    } else {
      own.push_back("CHORUS_JOIN=1");
    }
    const auto replaced = [&](std::string_view entry) {
      return entry.starts_with("CHORUS_RANK=") || entry.starts_with("CHORUS_LOCAL_RANK=") ||
             entry.starts_with("CHORUS_JOIN=") || std::any_of(own.begin(), own.end(), [&](const std::string& mine) {
               return entry.starts_with(std::string_view(mine).substr(0, mine.find('=') + 1));
             });
    };
    std::vector<std::string> entries;
    for (char** entry = environ; *entry != nullptr; ++entry)
      if (!replaced(*entry)) entries.emplace_back(*entry);
    entries.insert(entries.end(), own.begin(), own.end());
    return entries;
  }

  // Process `index` of ranks_: rank `index`, or a joiner past the job's ranks.
  bool spawn(int index, const std::string& address, const std::string& token) {
    rank_process& process = ranks_[static_cast<std::size_t>(index)];
    const int rank = index < args_.ranks ? index : -1;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "chorus-run: pipe: %s\n", std::strerror(errno));
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setpgroup(&attributes, 0);  // own process group: we end it whole
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);

    std::vector<std::string> env_entries = environment(rank, address, token);
    std::vector<char*> envp, argv;
    for (auto& entry : env_entries) envp.push_back(entry.data());
    envp.push_back(nullptr);
    for (auto& word : args_.command) argv.push_back(word.data());
    argv.push_back(nullptr);
    const int status = posix_spawnp(&process.pid, argv[0], &actions, &attributes, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    close(out[1]);
    close(err[1]);
    process.fds[0] = out[0];
    process.fds[1] = err[0];
    if (status != 0) {
      std::fprintf(stderr, "chorus-run: cannot start '%s': %s\n", argv[0], std::strerror(status));
      close(out[0]);
      close(err[0]);
      process.fds[0] = process.fds[1] = -1;
      return false;
    }
    process.running = true;
    return true;
  }

  // --join: the joiners start once their time has come, if the job still runs.
  void start_joiners() {
    if (!join_at_ || clock_type::now() < *join_at_) return;
    join_at_.reset();
    if (terminating_ || running_count() == 0) return;
    for (int k = 0; k < args_.joiners; ++k) {
      ranks_.emplace_back();
      if (!spawn(static_cast<int>(ranks_.size()) - 1, address_, token_)) {
        finish_with(127);
        terminate_all();
        return;
      }
    }
  }

  int processes() const { return static_cast<int>(ranks_.size()); }

  void supervise() {
    for (;;) {
      pump_output(100);
      reap();
      handle_signals();
      handle_deadlines();
      watch_for_stall();
      collect_records();
      start_joiners();
      if (running_count() == 0 && open_pipe_count() == 0) break;
      if (running_count() == 0 && !drain_until_) drain_until_ = clock_type::now() + std::chrono::seconds(1);
      if (drain_until_ && clock_type::now() > *drain_until_) break;  // a grandchild holds a pipe
    }
    for (int rank = 0; rank < processes(); ++rank)
      for (int stream = 0; stream < 2; ++stream) flush_partial(rank, stream);
  }

  void pump_output(int timeout_ms) {
    std::vector<pollfd> watched;
    std::vector<std::pair<int, int>> owners;  // (rank, stream)
    for (int rank = 0; rank < processes(); ++rank)
      for (int stream = 0; stream < 2; ++stream)
        if (int fd = ranks_[static_cast<std::size_t>(rank)].fds[stream]; fd >= 0) {
          watched.push_back({fd, POLLIN, 0});
          owners.emplace_back(rank, stream);
        }
    if (watched.empty()) {
      poll(nullptr, 0, timeout_ms);
      return;
    }
    if (poll(watched.data(), watched.size(), timeout_ms) <= 0) return;
    for (std::size_t i = 0; i < watched.size(); ++i)
      if (watched[i].revents != 0) read_from(owners[i].first, owners[i].second);
  }

  void read_from(int rank, int stream) {
    rank_process& process = ranks_[static_cast<std::size_t>(rank)];
    char chunk[65536];
    const ssize_t count = read(process.fds[stream], chunk, sizeof chunk);
    if (count <= 0) {
      if (count < 0 && errno == EINTR) return;
      close(process.fds[stream]);
      process.fds[stream] = -1;
      flush_partial(rank, stream);
      return;
    }
    std::string& pending = process.pending[stream];
    pending.append(chunk, static_cast<std::size_t>(count));
    std::size_t start = 0;
    for (std::size_t newline; (newline = pending.find('\n', start)) != std::string::npos; start = newline + 1)
      emit(rank, stream, std::string_view(pending).substr(start, newline + 1 - start));
    pending.erase(0, start);
  }

  void flush_partial(int rank, int stream) {
    std::string& pending = ranks_[static_cast<std::size_t>(rank)].pending[stream];
    if (pending.empty()) return;
    pending.push_back('\n');
    emit(rank, stream, pending);
    pending.clear();
  }

  // One write per line, so lines of different ranks never interleave.
  void emit(int rank, int stream, std::string_view line) const {
    const std::string label =
        rank < args_.ranks ? std::to_string(rank) : "join " + std::to_string(rank - args_.ranks + 1);
    std::string text = args_.prefix ? "[" + label + "] " : std::string();
    text.append(line);
    const int fd = stream == 0 ? 1 : 2;
    for (std::size_t written = 0; written < text.size();) {
      const ssize_t count = write(fd, text.data() + written, text.size() - written);
      if (count < 0 && errno == EINTR) continue;
      if (count <= 0) return;
      written += static_cast<std::size_t>(count);
    }
  }

  void reap() {
    for (int status = 0;;) {
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (int rank = 0; rank < processes(); ++rank) {
        rank_process& process = ranks_[static_cast<std::size_t>(rank)];
        if (process.pid != pid) continue;
        process.running = false;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (args_.keep_going && WIFSIGNALED(status) && !terminating_ && ++lost_ < processes()) {
          std::fprintf(stderr, "chorus-run: rank %d was killed by signal %d; the others go on (--keep-going)\n", rank,
                       WTERMSIG(status));
          continue;
        }
        if (code != 0 && !terminating_) {
          std::fprintf(stderr, "chorus-run: rank %d %s %d; ending the other ranks\n", rank,
                       WIFEXITED(status) ? "exited with code" : "was killed by signal",
                       WIFEXITED(status) ? code : WTERMSIG(status));
          end_job(code);
        }
      }
    }
  }

  void handle_signals() {
    if (forwarded_signal == 0 || terminating_) return;
    std::fprintf(stderr, "chorus-run: got signal %d; ending all ranks\n", static_cast<int>(forwarded_signal));
    finish_with(128 + forwarded_signal);
    terminate_all(forwarded_signal);
  }

  void handle_deadlines() {
    const auto now = clock_type::now();
    if (deadline_ && now > *deadline_ && !terminating_ && !records_due_ && running_count() > 0) {
      std::fprintf(stderr, "chorus-run: timeout after %lld ms; ending all ranks\n",
                   static_cast<long long>(args_.timeout->count()));
      end_job(124);
    }
    if (kill_at_ && now > *kill_at_) {
      for (auto& process : ranks_)
        if (process.running) kill(-process.pid, SIGKILL);
      kill_at_.reset();
    }
  }

  // SIGTERM every running rank's process group; SIGKILL after a grace period.
  void terminate_all(int signal_number = SIGTERM) {
    terminating_ = true;
    for (auto& process : ranks_)
      if (process.running) kill(-process.pid, signal_number);
    kill_at_ = clock_type::now() + std::chrono::seconds(3);
  }

  void finish_with(int code) {
    if (!exit_code_) exit_code_ = code;
  }

  int running_count() const {
    int count = 0;
    for (const auto& process : ranks_) count += process.running;
    return count;
  }

  int open_pipe_count() const {
    int count = 0;
    for (const auto& process : ranks_) count += (process.fds[0] >= 0) + (process.fds[1] >= 0);
    return count;
  }

  arguments args_;
  std::string address_, token_;
  std::optional<clock_type::time_point> join_at_;
  std::vector<rank_process> ranks_;
  std::optional<int> exit_code_;
  int lost_ = 0;  // ranks killed by a signal under --keep-going
  bool terminating_ = false;
  std::optional<clock_type::time_point> deadline_;
  std::optional<clock_type::time_point> kill_at_;
  std::optional<clock_type::time_point> drain_until_;
  std::filesystem::path record_directory_;  // empty: no flight records
  bool own_record_directory_ = false;
  bool reported_ = false;
  std::optional<clock_type::time_point> records_due_;  // asked for records, report by then
  std::filesystem::file_time_type asked_at_;
  std::uint64_t progress_total_ = 0;
  std::optional<clock_type::time_point> progress_seen_;  // when progress_total_ last changed
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const int status = launcher(parse(argc, argv)).run();
    // A rank killed while UCX was creating a shared-memory segment leaves
    // it in /dev/shm; the job is over, so sweep what nobody uses, and the
    // names of chorus's own segments whose creator died before removing
    // them (transport/shared_segment.hpp).
    chorus::transport::remove_orphaned_ucx_segments(std::chrono::seconds(0));
    chorus::transport::remove_orphaned_segments();
    return status;
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "chorus-run: %s\n", failure.what());
    return 1;
  }
}

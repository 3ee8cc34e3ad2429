#include "coordinator/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/logging.h"
#include "core/str_cat.h"

extern char** environ;

namespace cascade::coordinator {

std::string DefaultWorkerBinary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "cascade-worker").string();
}

Launcher::Launcher(std::string worker_binary, std::string coordinator_address, std::chrono::milliseconds restart_delay)
    : worker_binary_(std::move(worker_binary)),
      coordinator_address_(std::move(coordinator_address)),
      restart_delay_(restart_delay) {}

Launcher::~Launcher() { StopAll(); }

absl::Status Launcher::Launch(const WorkerLaunch& l) {
  if (::access(worker_binary_.c_str(), X_OK) != 0) {
    return absl::NotFoundError(StrCat("worker binary ", worker_binary_, " is missing or not executable"));
  }
  auto child = std::make_unique<Child>();
  child->launch = l;
  if (absl::Status s = Spawn(child.get()); !s.ok()) return s;
  Child* c = child.get();
  children_.push_back(std::move(child));
  c->logger = std::thread([this, c] { Supervise(c); });
  return absl::OkStatus();
}

absl::Status Launcher::Spawn(Child* c) {
  const WorkerLaunch& l = c->launch;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(StrCat("pipe: ", std::strerror(errno)));
  std::vector<std::string> args = {worker_binary_, "--coordinator", coordinator_address_,
                                   "--node",       l.node,          "--device",
                                   l.device,       "--threads",     std::to_string(l.n_threads)};
  if (l.draft) args.push_back("--draft");
  args.insert(args.end(), l.extra_args.begin(), l.extra_args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& e : l.extra_env) env.push_back(e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: own process group, dies with the coordinator, output into the pipe.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  {
    absl::MutexLock lock(&c->mu);
    c->pid = pid;
    c->out_fd = fds[0];
    // A restart that raced StopAll (it checked `stopping` before StopAll set it): StopAll
    // signalled the old pid, so this child is stopped here.
    if (c->stopping) ::kill(-pid, SIGTERM);
  }
  CASCADE_LOG(Info) << "launched worker for stage " << l.stage << " (pid " << pid << ")";
  return absl::OkStatus();
}

void Launcher::Supervise(Child* c) {
  while (true) {
    FILE* in = ::fdopen(c->out_fd, "r");
    char line[4096];
    while (in != nullptr && std::fgets(line, sizeof(line), in) != nullptr) {
      if (c->launch.draft) {
        std::fprintf(stderr, "[draft] %s", line);
      } else {
        std::fprintf(stderr, "[stage %d] %s", c->launch.stage, line);
      }
      absl::MutexLock lock(&c->mu);
      c->tail.emplace_back(line);
      if (c->tail.size() > 20) c->tail.pop_front();
    }
    if (in != nullptr) std::fclose(in);
    int status = 0;
    ::waitpid(c->pid, &status, 0);
    std::string why = WIFSIGNALED(status) ? StrCat("killed by signal ", WTERMSIG(status))
                                          : StrCat("exited with code ", WEXITSTATUS(status));
    {
      absl::MutexLock lock(&c->mu);
      if (c->stopping) return;
      if (!c->tail.empty()) why += StrCat("; last output: ", c->tail.back());
    }
    if (!why.empty() && why.back() == '\n') why.pop_back();
    // Exit code 64 (EX_USAGE) is a worker refusing its arguments: another start would
    // refuse them again, so the slot stays open and start-up times out saying why.
    const bool usage_error = WIFEXITED(status) && WEXITSTATUS(status) == 64;
    CASCADE_LOG(Error) << "worker for stage " << c->launch.stage << " (pid " << c->pid << ") " << why
                       << (usage_error ? std::string("; not restarting it: fix its arguments")
                                       : StrCat("; restarting it in ", restart_delay_.count(), " ms"));
    if (on_exit_) on_exit_(c->launch.stage, why, usage_error);
    if (usage_error) return;
    std::this_thread::sleep_for(restart_delay_);
    {
      absl::MutexLock lock(&c->mu);
      if (c->stopping) return;
    }
    if (absl::Status s = Spawn(c); !s.ok()) {
      CASCADE_LOG(Error) << "cannot restart the worker for stage " << c->launch.stage << ": " << s.ToString();
      return;
    }
  }
}

void Launcher::StopAll() {
  for (auto& c : children_) {
    absl::MutexLock lock(&c->mu);
    c->stopping = true;
    if (c->pid > 0) ::kill(-c->pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (auto& c : children_) {
    const auto current_pid = [&c] {
      absl::MutexLock lock(&c->mu);
      return c->pid;
    };
    while (::kill(current_pid(), 0) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(-current_pid(), SIGKILL);
    if (c->logger.joinable()) c->logger.join();
  }
  children_.clear();
}

}  // namespace cascade::coordinator

// `cascade`: the command-line front of Cascade. See `cascade help`.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/cli/commands.h"
#include "core/logging.h"

namespace {

constexpr char kUsage[] =
    "usage: cascade <command> [options]\n"
    "commands:\n"
    "  info      --model PATH [--json]                      model config, tensor counts and sizes\n"
    "  tokenize  --model PATH (--text T | --chat T) [--add-special] [--json] [--chat-template NAME]\n"
    "  run       --model PATH (--prompt T | --prompt-ids 1,2,3 | --chat T) [--max-tokens N]\n"
    "            [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--threads N] [--json]\n"
    "            [--kv-window-tokens W [--kv-sink-tokens S]]  sink + window attention (lossy)\n"
    "  perplexity --model PATH --file TEXT [--ctx N] [--threads N] [--kv-window-tokens W [--kv-sink-tokens S]]\n"
    "  generate  --server ADDR (--prompt T | --prompt-ids 1,2,3 | --chat T) [flags as run] [--json]\n"
    "  chat      --server ADDR [--system T] [sampling flags]   interactive, streamed\n"
    "  status    --server ADDR [--wait SECONDS]                 exit 0 once the cluster is ready\n"
    "  bench     --server ADDR [--requests N] [--concurrency C] [--prompt-tokens P] [--max-tokens M] [--json FILE]\n"
    "generate, chat, status and bench speak TLS with --tls-ca FILE (or $CASCADE_TLS_CA), the CA bundle to\n"
    "verify the server with, and send $CASCADE_API_KEY when it is set.\n"
    "`cascade COMMAND --help` lists every option of a command. stderr carries errors and warnings;\n"
    "CASCADE_LOG=info adds the info log (such as the model keys a file did not give).\n";

}  // namespace

int main(int argc, char** argv) {
  // A command's results go to stdout and its failure is one line on stderr; the info log
  // (the servers' and workers' record) only when asked for. `cascade info` prints the
  // defaulted keys itself.
  const char* log = std::getenv("CASCADE_LOG");
  if (log == nullptr || std::strcmp(log, "info") != 0) {
    cascade::internal::SetMinLogLevel(cascade::internal::LogLevel::kWarning);
  }
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "info") return cascade::cli::InfoCommand(argc, argv);
  if (cmd == "tokenize") return cascade::cli::TokenizeCommand(argc, argv);
  if (cmd == "run") return cascade::cli::RunCommand(argc, argv);
  if (cmd == "perplexity") return cascade::cli::PerplexityCommand(argc, argv);
  if (cmd == "generate") return cascade::cli::GenerateCommand(argc, argv);
  if (cmd == "chat") return cascade::cli::ChatCommand(argc, argv);
  if (cmd == "status") return cascade::cli::StatusCommand(argc, argv);
  if (cmd == "bench") return cascade::cli::BenchCommand(argc, argv);
  std::fprintf(stderr, "cascade: unknown command '%s' (try `cascade help`)\n", cmd.c_str());
  return 2;
}

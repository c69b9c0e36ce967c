// The `rapid` command. `rapid net` runs here, in-process, whenever this code can answer it (an
// ASTRA-sim network file, options written out in full); every other command, and any `net`
// request needing argparse or our hardware YAML, becomes `python -P -m sweep.cli` with the same
// arguments, run by the interpreter of the environment this launcher is installed in.
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "netcli.hpp"

namespace {

struct NeedPython {};

bool executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string own_directory() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

[[noreturn]] void exec_python(int argc, char** argv) {
  std::vector<std::string> candidates;
  if (const char* forced = std::getenv("RAPID_PYTHON")) candidates.push_back(forced);
  const std::string dir = own_directory();
  if (!dir.empty()) {
    candidates.push_back(dir + "/python3");
    candidates.push_back(dir + "/python");
  }
  candidates.push_back(RAPID_BUILD_PYTHON);  // the interpreter that built this launcher
  std::vector<char*> args;
  static char p_flag[] = "-P", m_flag[] = "-m", module[] = "sweep.cli";
  for (const std::string& python : candidates) {
    if (!executable(python)) continue;
    args = {const_cast<char*>(python.c_str()), p_flag, m_flag, module};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(python.c_str(), args.data());
  }
  std::fprintf(stderr, "rapid: error: no Python interpreter found next to %s (set RAPID_PYTHON)\n",
               dir.empty() ? "this launcher" : dir.c_str());
  std::exit(127);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "net") {
    netsim::NetArgs args;
    if (netsim::parse_net_argv(argc - 2, argv + 2, args)) {
      try {
        const netsim::NetOutcome outcome =
            netsim::run_net(args, [](const std::string&, std::optional<int64_t>) -> std::vector<netsim::DimSpec> {
              throw NeedPython{};
            });
        std::signal(SIGPIPE, SIG_IGN);  // a reader that left (head) ends the output quietly, as in Python
        std::fwrite(outcome.out.data(), 1, outcome.out.size(), stdout);
        std::fwrite(outcome.err.data(), 1, outcome.err.size(), stderr);
        std::fflush(stdout);
        return outcome.status;
      } catch (const NeedPython&) {
      }
    }
  }
  exec_python(argc, argv);
}

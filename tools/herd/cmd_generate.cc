#include <cstdio>

#include "tools/herd/commands.h"

namespace herd::cli {

int CmdGenerate(int, char**) {
  std::fprintf(stderr, "herd: error: 'generate' is not available in this build yet\n");
  return 1;
}

}  // namespace herd::cli

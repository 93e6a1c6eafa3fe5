#include <cstdio>

#include "tools/herd/commands.h"

namespace herd::cli {

int CmdPerplexity(int, char**) {
  std::fprintf(stderr, "herd: error: 'perplexity' is not available in this build yet\n");
  return 1;
}

}  // namespace herd::cli

#include <cstdio>

#include "tools/herd/commands.h"

namespace herd::cli {

int CmdQuantize(int, char**) {
  std::fprintf(stderr, "herd: error: 'quantize' is not available in this build yet\n");
  return 1;
}

}  // namespace herd::cli

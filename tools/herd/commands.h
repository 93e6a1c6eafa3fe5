// Subcommands of the herd CLI, one file each (cmd_<name>.cc). Each returns the
// process exit status: 0 success, 1 error (one line on stderr), 2 usage error.
#pragma once

namespace herd::cli {

int CmdQuantize(int argc, char** argv);      // herd quantize IN OUT TYPE [flags]
int CmdPerplexity(int argc, char** argv);    // herd perplexity -m MODEL -f TEXT -c N
int CmdUp(int argc, char** argv);            // herd up --models DIR --workers N
int CmdGenerate(int argc, char** argv);      // herd generate --gateway ADDR -m MODEL -p PROMPT
int CmdHealth(int argc, char** argv);        // herd health ADDR [--service NAME] [--timeout S]
int CmdChatTemplate(int argc, char** argv);  // herd chat-template (-m MODEL | --chat-template F) --messages F
int CmdEmbed(int argc, char** argv);
int CmdInspect(int argc, char** argv);  // herd inspect MODEL [--tensor NAME [--rows A:B] [--dequant]]         // herd
                                        // embed -m MODEL -p TEXT [--pooling mean|cls|last]

}  // namespace herd::cli

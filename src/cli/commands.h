// commands.h - the subcommands of the `kvtier` command. Each returns the
// process exit status (0 ok, 1 runtime error, 2 usage error) and prints one
// clear error line on failure.
#ifndef KVT_COMMANDS_H
#define KVT_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_dm_model(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_kvbench(int argc, char **argv);
int cmd_beam(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_sim(int argc, char **argv);

#endif

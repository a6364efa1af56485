/*
 * The subcommands of `flashcl`. Each takes the arguments after its own name
 * (argv[0] is the first option) and returns the process exit status
 * (see tool_errors.h). Each help function prints the command's usage.
 */
#ifndef FLASHCL_TOOLS_COMMANDS_H
#define FLASHCL_TOOLS_COMMANDS_H

#include <stdio.h>

int cmd_info(int argc, char **argv);
void cmd_info_help(FILE *out);

int cmd_attention(int argc, char **argv);
void cmd_attention_help(FILE *out);

int cmd_bench(int argc, char **argv);
void cmd_bench_help(FILE *out);

int cmd_tune(int argc, char **argv);
void cmd_tune_help(FILE *out);

#endif

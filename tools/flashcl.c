/* `flashcl`: the command line of FlashCL. Dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include <flashcl.h>

#include "commands.h"
#include "tool_errors.h"

typedef struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    void (*help)(FILE *out);
} command;

static const command commands[] = {
    {"info", "list OpenCL devices and the plans FlashCL picks on them", cmd_info, cmd_info_help},
    {"attention", "compute attention on .npy files", cmd_attention, cmd_attention_help},
    {"bench", "time the flash and standard paths and check they agree", cmd_bench, cmd_bench_help},
    {"tune", "measure the plans on this device and keep the fastest (tuning file)", cmd_tune, cmd_tune_help},
};
enum { COMMAND_COUNT = sizeof commands / sizeof commands[0] };

static void print_usage(FILE *out) {
    fputs("usage: flashcl COMMAND [OPTIONS]\n"
          "       flashcl help COMMAND | --help | --version\n"
          "\n"
          "FlashCL: exact, IO-aware attention (FlashAttention) on any OpenCL device.\n"
          "\n"
          "commands:\n",
          out);
    for (size_t i = 0; i < COMMAND_COUNT; ++i) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "attention, bench and tune run on --device SPEC, else $FLASHCL_DEVICE, else\n"
          "the first GPU, else the first device; SPEC is \"P:D\" as `flashcl info`\n"
          "lists it (info lists every device), or text found in the device's or the\n"
          "platform's name or vendor.\n"
          "\n"
          "Exit status: 0 success, 1 failure, 2 bad usage or input.\n",
          out);
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < COMMAND_COUNT; ++i)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static int unknown_command(const char *name) {
    return tool_usage_error("unknown command '%s' (try 'flashcl --help')", name);
}

/* `flashcl help [COMMAND]` */
static int run_help(int argc, char **argv) {
    if (argc < 1) {
        print_usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (argc > 1) return tool_usage_error("help: expected one command name, got %d arguments", argc);
    const command *cmd = find_command(argv[0]);
    if (cmd == NULL) return unknown_command(argv[0]);
    cmd->help(stdout);
    return TOOL_EXIT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        if (argc > 2) {
            fprintf(stderr, "flashcl: --version takes no arguments, got '%s'\n", argv[2]);
            return TOOL_EXIT_USAGE;
        }
        /* Both versions: the header the tool was built with and the library it runs with. */
        printf("flashcl %s (library %s)\n", FLASHCL_VERSION_STRING, flashcl_version_string());
        return TOOL_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) return run_help(argc - 2, argv + 2);
    const command *cmd = find_command(name);
    if (cmd == NULL) return unknown_command(name);
    int rc = cmd->run(argc - 2, argv + 2);
    if (rc == TOOL_SHOW_HELP) {
        cmd->help(stdout);
        rc = TOOL_EXIT_OK;
    }
    /* A full disk or closed pipe on stdout is a failure, not a success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("flashcl: error writing to standard output\n", stderr);
        if (rc == TOOL_EXIT_OK) rc = TOOL_EXIT_FAILED;
    }
    return rc;
}

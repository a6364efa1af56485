/*
 * What test_cli.c shares with the variant CLI checks (cli_variants.c): the
 * work directory, running the tool, and the refused-call check.
 */
#ifndef FLASHCL_TEST_CLI_HARNESS_H
#define FLASHCL_TEST_CLI_HARNESS_H

/* The directory inputs and outputs live in. */
extern char *cli_work;

/* dir/name in a ring of buffers, enough for every path one command line names. */
char *cli_path_in(const char *dir, const char *name);

/* Runs the tool with `args`; returns its exit status, output in *out / *err (malloc'd). */
int cli_run_tool(const char *args, char **out, char **err);

/* Exit status 2, exactly one line on stderr, and nothing new in the work dir. */
void cli_expect_usage_error(const char *label, const char *args);
/* The same, and the line must contain `want` (when not NULL). */
void cli_expect_usage_error_naming(const char *label, const char *args, const char *want);

/* cli_variants.c: attention with every variant flag against the variant reference. */
void cli_check_variants(void);
/* Bad variant flags and files: exit 2, one line naming the option. */
void cli_check_variant_errors(void);
/* `bench` with variant flags (files and the data-making words): flash with the features next to
 * plain flash, --json; bad values refused. */
void cli_check_bench_variants(void);

/* cli_kvcache.c: attention with a KV cache (contiguous, paged with append and rotary, fp8) against the
 * reference; bad tables and files. */
void cli_check_kvcache(void);
/* `bench` on decode shapes: the measured read bandwidth and %bw; the KV-cache mode (paged, bf16, fp8). */
void cli_check_bench_decode(void);

#endif

/* Text forms of flashcl_plan. */
#include "plan_print.h"

#include "tool_errors.h"

/* The plan's strings are fixed arrays; printing them with their size as the
 * precision stays in bounds even if a library bug left one unterminated. */
#define PLAN_STR(field) (int)sizeof(field), (field)

const char *plan_staging_name(int staging) {
    return staging == FLASHCL_STAGING_LOCAL ? "local" : staging == FLASHCL_STAGING_DIRECT ? "direct" : "unknown";
}

void plan_print_full(FILE *out, const flashcl_plan *plan, const char *indent) {
    fprintf(out, "%skernel %.*s, Br %d, Bc %d, threads/row %d, staging %s, WG size %zu\n", indent,
            PLAN_STR(plan->kernel), plan->block_rows, plan->block_cols, plan->threads_per_row,
            plan_staging_name(plan->staging), plan->work_group_size);
    fprintf(out, "%slocal %zu B, private %zu B, scratch %zu B, origin %.*s\n", indent, plan->local_mem_bytes,
            plan->private_mem_bytes, plan->scratch_bytes, PLAN_STR(plan->origin));
    /* reason and build options are free text: keep each on its one line. */
    char reason[sizeof plan->reason + 1], options[sizeof plan->build_options + 1];
    snprintf(reason, sizeof reason, "%.*s", PLAN_STR(plan->reason));
    snprintf(options, sizeof options, "%.*s", PLAN_STR(plan->build_options));
    fprintf(out, "%sreason: ", indent);
    tool_print_one_line(out, reason);
    fprintf(out, "\n%sbuild options: ", indent);
    tool_print_one_line(out, options[0] ? options : "(none)");
    fputc('\n', out);
}

void plan_print_summary(FILE *out, const flashcl_plan *plan) {
    fprintf(out, "%.*s: Br %d, Bc %d, WG %zu, staging %s, local %zu B", PLAN_STR(plan->kernel), plan->block_rows,
            plan->block_cols, plan->work_group_size, plan_staging_name(plan->staging), plan->local_mem_bytes);
}

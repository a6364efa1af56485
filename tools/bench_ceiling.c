/* The roof's and the read bandwidth's lines, columns and JSON; see bench_ceiling.h. */
#include "bench_ceiling.h"

#include <math.h>

#include "json_print.h"

void ceiling_print_line(FILE *out, const bench_ceiling_names *names, double ceiling, const char *source) {
    /* The label is padded to 9 columns, so the values line up with bench's other header lines. */
    if (isnan(ceiling))
        fprintf(out, "%-9sn/a (%s)\n", names->label, source);
    else
        fprintf(out, "%-9s%.1f %s (%s); %%%s = %s / %s\n", names->label, ceiling, names->unit, source, names->column,
                names->unit, names->label);
}

void ceiling_format_percent(char *buf, size_t cap, double ceiling, double rate) {
    if (isnan(ceiling) || isnan(rate))
        snprintf(buf, cap, "n/a");
    else
        snprintf(buf, cap, "%.1f%%", 100.0 * rate / ceiling);
}

/* NaN (no ceiling, or no rate) prints as null. */
void ceiling_json_fields(FILE *out, const bench_ceiling_names *names, double ceiling, double rate) {
    json_member_number(out, names->json_value, ceiling);
    json_member_number(out, names->json_percent, 100.0 * rate / ceiling);
}

void ceiling_json_summary(FILE *out, const bench_ceiling_names *names, double ceiling, const char *source) {
    json_member_number(out, names->json_value, ceiling);
    json_member_string(out, names->json_source, source);
}

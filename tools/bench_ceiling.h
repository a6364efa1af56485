/*
 * How `bench` shows a ceiling it divides its rates by (the roof in GFLOP/s,
 * roof.h; the read bandwidth in GB/s, read_bandwidth.h): the header line, the
 * percent column and the JSON members. Both ceilings print the same way; only
 * their names differ, so each module gives its names and this file the rest.
 */
#ifndef FLASHCL_TOOLS_BENCH_CEILING_H
#define FLASHCL_TOOLS_BENCH_CEILING_H

#include <stddef.h>
#include <stdio.h>

typedef struct bench_ceiling_names {
    const char *label;        /* the header line's first word(s): "roof" */
    const char *unit;         /* "GFLOP/s" */
    const char *column;       /* the percent column, without its '%': "roof" */
    const char *json_value;   /* "roof_gflops" */
    const char *json_percent; /* "roof_percent" */
    const char *json_source;  /* "roof_source" */
} bench_ceiling_names;

/* "roof     196.3 GFLOP/s (source); %roof = GFLOP/s / roof" or "roof     n/a (source)" (ceiling NaN). */
void ceiling_print_line(FILE *out, const bench_ceiling_names *names, double ceiling, const char *source);
/* The percent column for a rate: "51.2%", or "n/a" when the ceiling or the rate is NaN. */
void ceiling_format_percent(char *buf, size_t cap, double ceiling, double rate);
/* JSON members ,"<json_value>":x,"<json_percent>":y (null without a ceiling or a rate). */
void ceiling_json_fields(FILE *out, const bench_ceiling_names *names, double ceiling, double rate);
/* ,"<json_value>":x,"<json_source>":"..." for a summary object. */
void ceiling_json_summary(FILE *out, const bench_ceiling_names *names, double ceiling, const char *source);

#endif

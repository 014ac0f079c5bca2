/*
 * ferry_bench: the progress line of a sweep on a terminal (progress.c).
 *
 * Which block size of how many, the rate now and an estimate of the time
 * left, redrawn in place on stderr at most four times a second.  It is
 * drawn only when stderr is a terminal: logs and tests see nothing of it.
 * This part uses no other part of ferry_bench, so that util.c's messages
 * can clear the line before they print.
 */
#ifndef FERRY_BENCH_PROGRESS_H
#define FERRY_BENCH_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A quarter second between redraws: fast enough to look alive, slow
 * enough to cost the measurement nothing. */
#define PROGRESS_REDRAW_NS 250000000u

/* A sweep of nsteps block sizes starts; the line is on from here when
 * stderr is a terminal. */
void progress_begin(size_t nsteps);
/* Step i (from 0) starts: label names it ("256K"); expect_s is how long
 * it should take (warmup + duration), 0 when not known (--iterations). */
void progress_step(size_t i, const char *label, double expect_s);
/* Whether the line is on: the once-a-second lines give way to it. */
bool progress_on(void);
/* The current step at time t (now_ns's clock) has moved bytes and ops so
 * far; redraws when PROGRESS_REDRAW_NS have passed since the last time. */
void progress_tick(uint64_t t, uint64_t bytes, uint64_t ops, bool warmup);
/* Blanks the line, before anything else is printed to the terminal; the
 * next tick draws it again. */
void progress_clear(void);
/* The sweep is over: blanks the line for good. */
void progress_end(void);

#endif /* FERRY_BENCH_PROGRESS_H */

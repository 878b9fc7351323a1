// Counts malloc calls per thread and prints them at exit, for comparing the
// allocations per call of two builds (bench/README.md, request_throughput).
// Not part of the build:
//   gcc -O2 -shared -fPIC bench/tools/malloc_count.c -o /tmp/malloc_count.so -ldl -lpthread
//   LD_PRELOAD=/tmp/malloc_count.so build/bench/request_throughput
//     --rounds 1 --requests 50000 --warmup 2000 --client outbound
//     --concurrency 64          (one command line)
// A thread is named by pthread_getname_np at its first malloc (CAF's worker
// is "caf.multiplexer"); only threads with more than 1000 calls are printed.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static void* (*real_malloc)(size_t);
static _Atomic long counts[64];
static char names[64][16];
static _Atomic int nthreads;
static __thread int slot = -1;
// dlsym itself may allocate before real_malloc is known.
static char bootstrap[65536];
static size_t bootstrap_used;

void* malloc(size_t n) {
  if (!real_malloc) {
    real_malloc = (void* (*)(size_t)) dlsym(RTLD_NEXT, "malloc");
    if (!real_malloc) {
      void* p = bootstrap + bootstrap_used;
      bootstrap_used += (n + 15) & ~(size_t) 15;
      return p;
    }
  }
  if (slot == -1) {
    slot = -2;
    int i = atomic_fetch_add(&nthreads, 1);
    if (i < 64) {
      pthread_getname_np(pthread_self(), names[i], sizeof names[i]);
      slot = i;
    }
  }
  if (slot >= 0)
    atomic_fetch_add(&counts[slot], 1);
  return real_malloc(n);
}

__attribute__((destructor)) static void report(void) {
  for (int i = 0; i < nthreads && i < 64; i++)
    if (counts[i] > 1000)
      fprintf(stderr, "mallocs %-16s %ld\n", names[i], counts[i]);
}

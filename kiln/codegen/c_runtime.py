"""The C runtime linked into every kernel library: a thread pool, the thread count, a run plan.

Exactly one translation unit of a library defines it (:data:`RUNTIME_SOURCE`, after the
prelude); every unit declares :data:`RUNTIME_DECLS`. Nothing here needs OpenMP: libraries link
only libc (and libm), so loading one never starts another runtime's threads.

Thread pool
-----------
A parallel loop of ``n`` iterations is a call ``kiln_parallel_for(fn, ctx, n)``: the code
generator outlines the loop body into ``static void fn(void* ctx, int64_t begin, int64_t end)``
and passes the variables it reads in a context struct. The call cuts ``[0, n)`` into
one home range per thread of the team, in order and as equal as whole iterations allow: thread 0
(the caller) the first, worker 1 the next, and so on; each range is cut into
``KILN_CHUNKS_PER_THREAD`` chunks (fewer when it has fewer iterations). A range's claims are one
64-bit word, the job's generation and the range's first and last unclaimed chunk. A thread
claims the chunks of its own range from the front with a compare-and-swap; when none is left it
takes chunks of the other ranges from their back. So a thread computes the same part of every
loop (the rows the previous kernel's loop left in its own cache, the weights its prefetches
brought into its own L2), the threads' shares differ by one iteration at most (28 iterations in
chunks of 4 had left one thread 16 of them), and

* the caller never waits for a worker that has not claimed a chunk: when a worker is descheduled
  (another process holds its core) the caller runs the remaining chunks itself, and only waits
  for chunks already running elsewhere;
* a worker that wakes up late sees a newer generation (or no chunk left) and claims nothing of
  a finished job; the job's parameters are read under a sequence check, so a worker never runs
  one job's chunk with another job's function.

Idle workers spin for ``KILN_SPIN_NS`` (a quiet machine keeps microsecond latency between
kernels), then sleep on a condition variable (a loaded machine gets its CPU back); the caller
is woken the same way when it waits longer than ``KILN_WAIT_SPIN_NS`` for running chunks.

The one wait left, for a chunk a worker has claimed, is long only when the OS descheduled that
worker (another process holds its core). The caller measures it: a wait longer than two of its
own chunks plus ``KILN_STALL_NS`` makes the following parallel loops run serially for twice
the wait, or for twice the previous serial period when the stall comes back within
``KILN_RECUR_NS`` of its end (at most ``KILN_MAX_BACKOFF_NS``). Under a sustained load the
library so runs at about its one-thread speed instead of stalling at every loop; a short
contention (another runtime's threads spinning down) costs a few milliseconds; on a quiet
machine nothing changes.

Workers are created on the first parallel loop that needs them, once per library (the pool is
static in the library, so every kernel of the library shares it), and the thread count set by
``kiln_set_num_threads`` applies from the next loop on (``<= 0``: the CPUs in the process's
affinity mask; Kiln's Python side always sets ``kiln.config.settings.num_threads``).

A parallel loop reached from inside a chunk (nested parallelism), or while another thread of the
process is running a parallel loop of the same library, runs serially on the calling thread: it
neither deadlocks nor oversubscribes. After ``fork`` the child starts with no workers (they do
not exist there) and creates new ones when it needs them.

Run plan
--------
``int32_t kiln_run_plan(int32_t n, void* const* fns, void** const* args)`` calls
``fns[i](args[i])`` for ``i = 0 .. n-1`` in order and returns -1, or the index of the first
kernel that returned non-zero (the ones after it do not run). The graph executor builds the
arrays once over its storage plan, so running a graph is one call from Python.
"""

from __future__ import annotations

from kiln.codegen.c_prelude import SCALAR_PRELUDE

__all__ = ["PARALLEL_FOR", "RUNTIME_DECLS", "RUNTIME_SOURCE", "RUN_PLAN_SYMBOL", "THREADS_SYMBOL",
           "runtime_unit"]

PARALLEL_FOR = "kiln_parallel_for"
RUN_PLAN_SYMBOL = "kiln_run_plan"
THREADS_SYMBOL = "kiln_set_num_threads"

RUNTIME_DECLS = r"""/* Kiln runtime: a parallel loop runs chunks [begin, end) of [0, n) on the pool. */
typedef void (*kiln_task_fn)(void* ctx, int64_t begin, int64_t end);
void kiln_parallel_for(kiln_task_fn fn, void* ctx, int64_t n);
"""

RUNTIME_SOURCE = r"""
/* ---- Kiln runtime: thread pool, thread count and run plan (one copy per library) ---- */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KILN_MAX_WORKERS 255
#define KILN_CHUNKS_PER_THREAD 4
#define KILN_SPIN_NS 200000L
#define KILN_WAIT_SPIN_NS 50000L
#define KILN_STALL_NS 200000L
#define KILN_MAX_BACKOFF_NS 250000000L
#define KILN_RECUR_NS 20000000L
#define KILN_WORKER_STACK (8u << 20)

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;      /* idle workers sleep here */
  pthread_cond_t finished;  /* the caller sleeps here for chunks still running elsewhere */
  uint64_t state;           /* generation << 32 of the last job published */
  uint32_t params_gen;      /* generation of the job parameters below (0 while written) */
  kiln_task_fn fn;
  void* ctx;
  int64_t n;
  uint32_t nchunks;         /* chunks of all the ranges */
  int32_t team;             /* threads taking part, the caller included */
  uint32_t done;            /* chunks of the current job finished (each thread adds its own
                               once, after its last: an add per chunk moved this line between
                               the cores per chunk; an empty loop at two threads 430 -> 314 ns) */
  int32_t sleepers;         /* workers waiting on `wake` */
  int32_t caller_waiting;   /* the caller waits on `finished` */
  int32_t owner;            /* 1 while a thread runs a job */
  int32_t threads;          /* requested thread count; <= 0: usable CPUs */
  int32_t workers;          /* workers started */
  uint32_t gen;             /* last generation published */
  int32_t fork_handler;     /* the atfork handler is registered */
  int64_t serial_until;     /* CLOCK_MONOTONIC ns: parallel loops before it run serially */
  int64_t backoff;          /* length of the last serial period, ns */
} kiln_pool_t;

static kiln_pool_t kiln__pool = {
  PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER
};
/* Thread t's home range of the current job: generation << 32 | first << 16 | end (unclaimed
   chunks first .. end-1), one cache line each. */
typedef struct { uint64_t word; char pad[56]; } kiln_range_t;
static kiln_range_t kiln__ranges[KILN_MAX_WORKERS + 1] __attribute__((aligned(64)));
/* Non-zero on a thread running a chunk: a parallel loop reached from there runs serially. */
static __thread int32_t kiln__in_task;

static inline void kiln__pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t kiln__now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int32_t kiln__usable_cpus(void) {
  static int32_t cached;
  int32_t n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (n > 0) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    n = CPU_COUNT(&set);
  } else {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    n = online > 0 ? (int32_t)online : 1;
  }
  if (n < 1) n = 1;
  __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
  return n;
}

static int32_t kiln__thread_count(void) {
  int32_t n = __atomic_load_n(&kiln__pool.threads, __ATOMIC_RELAXED);
  return n > 0 ? n : kiln__usable_cpus();
}

/* Threads for parallel loops; n <= 0 restores the default (the CPUs of the affinity mask). */
void kiln_set_num_threads(int32_t n) { __atomic_store_n(&kiln__pool.threads, n, __ATOMIC_RELAXED); }

/* The thread count parallel loops use now. */
int32_t kiln_get_num_threads(void) { return kiln__thread_count(); }

static void kiln__chunks_done(kiln_pool_t* p, uint32_t ran, uint32_t nchunks) {
  if (__atomic_add_fetch(&p->done, ran, __ATOMIC_SEQ_CST) == nchunks &&
      __atomic_load_n(&p->caller_waiting, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&p->lock);
    pthread_cond_signal(&p->finished);
    pthread_mutex_unlock(&p->lock);
  }
}

/* Thread t's home range of a loop of n iterations over a team: its first iteration in *lo, its
   size returned; and the chunks a range of `size` iterations is cut into. */
static inline int64_t kiln__range(int64_t n, int32_t team, int32_t t, int64_t* lo) {
  *lo = n * t / team;
  return n * (t + 1) / team - *lo;
}
static inline int64_t kiln__parts(int64_t size) {
  return size < KILN_CHUNKS_PER_THREAD ? size : KILN_CHUNKS_PER_THREAD;
}

/* Claim a chunk of range `t` of job `gen`: its first when `front`, else its last; -1 when the
   range is empty (or belongs to another job). */
static int64_t kiln__claim(uint32_t gen, int32_t t, int32_t front) {
  uint64_t word = __atomic_load_n(&kiln__ranges[t].word, __ATOMIC_ACQUIRE);
  for (;;) {
    uint32_t first = (uint32_t)(word >> 16) & 0xffffu, end = (uint32_t)word & 0xffffu;
    if ((uint32_t)(word >> 32) != gen || first >= end) return -1;
    uint64_t next = front ? word + (1u << 16) : word - 1;
    if (__atomic_compare_exchange_n(&kiln__ranges[t].word, &word, next, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return front ? first : end - 1;
  }
}

/* Run chunks of job `gen` as thread `index` of its team: its own range first, then what is left
   of the others; returns how many this thread ran. */
static uint32_t kiln__run_chunks(kiln_pool_t* p, uint32_t gen, int32_t index) {
  uint32_t params_gen = __atomic_load_n(&p->params_gen, __ATOMIC_ACQUIRE);
  kiln_task_fn fn = __atomic_load_n(&p->fn, __ATOMIC_RELAXED);
  void* ctx = __atomic_load_n(&p->ctx, __ATOMIC_RELAXED);
  int64_t n = __atomic_load_n(&p->n, __ATOMIC_RELAXED);
  uint32_t nchunks = __atomic_load_n(&p->nchunks, __ATOMIC_RELAXED);
  int32_t team = __atomic_load_n(&p->team, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (params_gen != gen || __atomic_load_n(&p->params_gen, __ATOMIC_RELAXED) != gen ||
      index >= team)
    return 0;
  uint32_t ran = 0;
  for (int32_t k = 0; k < team; ++k) {
    int32_t t = index + k < team ? index + k : index + k - team;
    int64_t lo, size = kiln__range(n, team, t, &lo), parts = kiln__parts(size), c;
    while ((c = kiln__claim(gen, t, k == 0)) >= 0) {
      fn(ctx, lo + size * c / parts, lo + size * (c + 1) / parts);
      ran += 1;
    }
  }
  if (ran) kiln__chunks_done(p, ran, nchunks);
  return ran;
}

/* Wait until a job newer than `seen` is published: spin a while, then sleep. */
static uint32_t kiln__next_job(kiln_pool_t* p, uint32_t seen) {
  int64_t start = kiln__now_ns();
  for (uint32_t spins = 1;; ++spins) {
    uint32_t gen = (uint32_t)(__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32);
    if (gen != seen) return gen;
    kiln__pause();
    if ((spins & 63) == 0 && kiln__now_ns() - start > KILN_SPIN_NS) break;
  }
  uint32_t gen;
  pthread_mutex_lock(&p->lock);
  __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
  while ((gen = (uint32_t)(__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) >> 32)) == seen)
    pthread_cond_wait(&p->wake, &p->lock);
  __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&p->lock);
  return gen;
}

static void* kiln__worker(void* arg) {
  kiln_pool_t* p = &kiln__pool;
  int32_t index = (int32_t)(intptr_t)arg;  /* 1, 2, ...: the caller is thread 0 */
  uint32_t seen = (uint32_t)(__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32);
  kiln__in_task = 1;
  for (;;) {
    seen = kiln__next_job(p, seen);
    kiln__run_chunks(p, seen, index);
  }
  return NULL;
}

static void kiln__after_fork(void) {
  /* The child has none of the parent's workers: start from an empty pool. */
  kiln_pool_t* p = &kiln__pool;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->finished, NULL);
  p->workers = 0;
  p->sleepers = 0;
  p->caller_waiting = 0;
  p->owner = 0;
  kiln__in_task = 0;
}

static void kiln__start_workers(kiln_pool_t* p, int32_t wanted) {
  if (wanted > KILN_MAX_WORKERS) wanted = KILN_MAX_WORKERS;
  if (p->workers >= wanted) return;
  if (!p->fork_handler) {
    pthread_atfork(NULL, NULL, kiln__after_fork);
    p->fork_handler = 1;
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  /* workers inherit a full mask: no signal lands there */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, KILN_WORKER_STACK);
  while (p->workers < wanted) {
    pthread_t thread;
    if (pthread_create(&thread, &attr, kiln__worker, (void*)(intptr_t)(p->workers + 1)) != 0)
      break;  /* fewer workers: the caller runs what they would have */
    p->workers += 1;
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void kiln__wait_done(kiln_pool_t* p, uint32_t nchunks) {
  int64_t start = 0;
  for (uint32_t spins = 1; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != nchunks; ++spins) {
    kiln__pause();
    if ((spins & 63) == 0) {
      if (start == 0) {
        start = kiln__now_ns();
      } else if (kiln__now_ns() - start > KILN_WAIT_SPIN_NS) {
        pthread_mutex_lock(&p->lock);
        __atomic_store_n(&p->caller_waiting, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&p->done, __ATOMIC_SEQ_CST) != nchunks)
          pthread_cond_wait(&p->finished, &p->lock);
        __atomic_store_n(&p->caller_waiting, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&p->lock);
        return;
      }
    }
  }
}

/* After a job, from how long the caller waited for chunks running elsewhere: a wait much
   longer than a chunk means a worker holding one was descheduled (another process wants its
   core), so the next parallel loops run serially for twice the wait; when the stall comes back
   within KILN_RECUR_NS of the end of that serial period (a lasting load), the period doubles
   instead, up to KILN_MAX_BACKOFF_NS. */
static void kiln__note_wait(kiln_pool_t* p, int64_t start, int64_t own_end, int64_t done,
                            uint32_t own_chunks) {
  if (own_chunks == 0) return;
  int64_t waited = done - own_end, per_chunk = (own_end - start) / own_chunks;
  if (waited <= 2 * per_chunk + KILN_STALL_NS) return;
  int64_t last_end = __atomic_load_n(&p->serial_until, __ATOMIC_RELAXED);
  int64_t backoff = done - last_end < KILN_RECUR_NS ? 2 * p->backoff : 0;
  if (backoff < 2 * waited) backoff = 2 * waited;
  p->backoff = backoff < KILN_MAX_BACKOFF_NS ? backoff : KILN_MAX_BACKOFF_NS;
  __atomic_store_n(&p->serial_until, done + p->backoff, __ATOMIC_RELAXED);
}

void kiln_parallel_for(kiln_task_fn fn, void* ctx, int64_t n) {
  kiln_pool_t* p = &kiln__pool;
  int32_t threads = kiln__thread_count();
  if (n <= 1 || threads <= 1 || kiln__in_task) {
    fn(ctx, 0, n);  /* serial: one thread, or nested in a chunk */
    return;
  }
  int64_t start = kiln__now_ns();
  if (start < __atomic_load_n(&p->serial_until, __ATOMIC_RELAXED) ||
      __atomic_exchange_n(&p->owner, 1, __ATOMIC_ACQUIRE) != 0) {
    fn(ctx, 0, n);  /* serial: backing off after a stall, or the pool is busy elsewhere */
    return;
  }
  kiln__start_workers(p, threads - 1);
  int32_t team = p->workers + 1 < threads ? p->workers + 1 : threads;
  if (team <= 1) {
    __atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
    fn(ctx, 0, n);
    return;
  }
  int64_t lo;
  uint32_t nchunks = 0;
  for (int32_t t = 0; t < team; ++t) nchunks += (uint32_t)kiln__parts(kiln__range(n, team, t, &lo));
  uint32_t gen = ++p->gen;
  if (gen == 0) gen = ++p->gen;
  __atomic_store_n(&p->params_gen, 0, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&p->fn, fn, __ATOMIC_RELAXED);
  __atomic_store_n(&p->ctx, ctx, __ATOMIC_RELAXED);
  __atomic_store_n(&p->n, n, __ATOMIC_RELAXED);
  __atomic_store_n(&p->nchunks, nchunks, __ATOMIC_RELAXED);
  __atomic_store_n(&p->team, team, __ATOMIC_RELAXED);
  __atomic_store_n(&p->params_gen, gen, __ATOMIC_RELEASE);
  __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
  for (int32_t t = 0; t < team; ++t) {
    uint64_t parts = (uint64_t)kiln__parts(kiln__range(n, team, t, &lo));
    __atomic_store_n(&kiln__ranges[t].word, (uint64_t)gen << 32 | parts, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&p->state, (uint64_t)gen << 32, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
  }
  kiln__in_task = 1;
  uint32_t own_chunks = kiln__run_chunks(p, gen, 0);
  kiln__in_task = 0;
  int64_t own_end = kiln__now_ns();
  kiln__wait_done(p, nchunks);
  kiln__note_wait(p, start, own_end, kiln__now_ns(), own_chunks);
  __atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
}

/* Run kernels in order: fns[i](args[i]); -1 when all return 0, else the first failing index. */
typedef int32_t (*kiln_kernel_fn)(void** args);
int32_t kiln_run_plan(int32_t n, void* const* fns, void** const* args) {
  for (int32_t i = 0; i < n; ++i) {
    kiln_kernel_fn kernel;
    memcpy(&kernel, &fns[i], sizeof(kernel));
    if (kernel(args[i]) != 0) return i;
  }
  return -1;
}
"""


def runtime_unit() -> str:
    """The runtime's own translation unit: the scalar prelude, then :data:`RUNTIME_SOURCE`.

    It is compiled once per compiler and flags (in the compile cache) and linked into every
    library; kernel units only declare it (:data:`RUNTIME_DECLS`).
    """
    return "\n".join(p.rstrip("\n") + "\n" for p in (SCALAR_PRELUDE, RUNTIME_DECLS, RUNTIME_SOURCE))

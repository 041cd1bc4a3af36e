// Starting to fetch a cache line that the calling thread is about to write.
//
// A line that another core wrote last costs a transfer whoever fetches it; fetched for writing ahead of time, the
// transfer overlaps the caller's other work, where a later store would wait for it (and a locked instruction, which
// waits for every store before it, would expose it). A read prefetch would bring the line shared, and the write would
// then still have to take it from the other cores.
//
// Thread safety: a hint; it changes no value and orders nothing. Cost: one instruction.
#pragma once

namespace depengine::support {

inline void prefetch_for_write(const void* address) noexcept {
#if defined(__x86_64__)
  // PREFETCHW (3DNow!'s, on every AMD64 processor and on Intel's since Broadwell; earlier ones execute it as a NOP):
  // GCC emits it for __builtin_prefetch(p, 1) only where the target flags name PRFCHW, and a read prefetch otherwise.
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 1);
#endif
}

}  // namespace depengine::support

// Transparent huge pages for large host buffers that a kernel streams end to end (packed
// weights): where the system leaves huge pages to the program (THP "madvise" mode,
// Debian's default), a decode step streaming ~0.8 GB of weights through 4 KiB pages crosses
// a page boundary, where the hardware prefetchers stop, and takes a TLB miss every 4 KiB.
// On 2 MiB pages one Zen 5 thread decoded a 1B Q4_K_M model 2-4% faster (the read probe,
// a plain stream, runs at the same speed on either).
#pragma once

#include <cstddef>

namespace cascade {

// Advises huge pages for the 2 MiB-aligned interior of [data, data + bytes): the edges stay
// 4 KiB pages, so the buffer's resident size does not grow. Call before the buffer's first
// write (a page faulted in before stays small until the kernel collapses it). Does nothing
// below 4 MiB, or where the kernel refuses (no THP): an advice, never an error.
void AdviseHugePages(void* data, size_t bytes);

}  // namespace cascade

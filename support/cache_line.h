// The cache-line size the library lays its shared state out for: the unit of every `alignas` that keeps fields
// written by different threads apart (false sharing), and of the layouts that static_asserts hold (op_record.h).
//
// Why a constant of our own and not std::hardware_destructive_interference_size: GCC warns (-Winterference-size) on
// every use of it in a header or an inline function, because its value follows -mtune and two translation units built
// with different flags would then disagree on a struct's layout, an ODR and ABI break for an installed library; and
// Clang 14 with libstdc++ does not define it at all. 64 is the line of every x86-64 processor and of most AArch64
// cores; on parts with 128-byte lines (Apple's, or an adjacent-line prefetcher pairing two lines), 64 still separates
// the fields' lines, and a contended pair may then share a prefetch pair, which costs speed, never correctness.
//
// Thread safety: a constant. Cost: none; changing it changes the layout of every aligned struct (rebuild everything).
#pragma once

#include <cstddef>

namespace depengine::support {

inline constexpr std::size_t kCacheLine = 64;

}  // namespace depengine::support

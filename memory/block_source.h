// BlockSource: where a MemoryPool (memory_pool.h) gets its blocks from and gives them back to: host memory
// (HostBlockSource), or one device's memory through a stream backend (DeviceBlockSource). The pool decides when a block
// may be reused or freed; the source only allocates and frees, so a new kind of memory (pinned host memory, another
// allocator) is one small subclass and the pool's reuse logic stays the same.
//
// Used by MemoryPool, which owns its source (a std::unique_ptr handed to its constructor), and built by Buffers
// (buffers/buffer.cpp: one host pool, and one pool per device of the stream executor) or by a user who makes a
// MemoryPool of their own.
//
// Contract:
// - A slow path: the pool calls allocate() only to grow, and deallocate() only to trim free blocks or at its own
//   destruction, never while it holds its lock. deallocate() receives the bytes and alignment the block was allocated
//   with.
// - Thread safety: the pool may call allocate() and deallocate() from several threads at once (its callers' threads),
//   so an implementation must be safe for concurrent calls; both given here are (operator new; the stream backends'
//   allocate and deallocate).
// - Lifetime: a block lives from allocate() until its deallocate(), which the caller makes only once it knows no work
//   uses the block any more. A MemoryPool owns its source and gives back every block it holds before destroying it;
//   DeviceBlockSource borrows its backend, which must outlive the source.
// - Failure: allocate() throws (std::bad_alloc, StreamError) and the pool uncounts the block and rethrows; deallocate()
//   never throws (a backend drops its errors).
#pragma once

#include <cstddef>

namespace depengine {

class StreamBackend;

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // `bytes` (> 0) aligned to `alignment` (a power of two, at most max_alignment()). Throws on failure (std::bad_alloc,
  // StreamError).
  [[nodiscard]] virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;
  // Frees a block from allocate(bytes, alignment). The caller knows no work uses it any more.
  virtual void deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept = 0;
  // The largest alignment allocate() honours.
  [[nodiscard]] virtual std::size_t max_alignment() const noexcept = 0;
};

// Host memory from aligned operator new. Any alignment.
class HostBlockSource final : public BlockSource {
 public:
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) override;
  void deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] std::size_t max_alignment() const noexcept override { return std::size_t{1} << 20; }
};

// One device's memory through StreamBackend::allocate/deallocate (cudaMalloc, hipMalloc, the host backend's
// simulation), which align to 256 bytes. The backend must outlive the source.
class DeviceBlockSource final : public BlockSource {
 public:
  // Blocks of `device` of `backend`.
  DeviceBlockSource(StreamBackend& backend, int device) noexcept : backend_(backend), device_(device) {}
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) override;
  void deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] std::size_t max_alignment() const noexcept override { return 256; }

 private:
  StreamBackend& backend_;
  int device_;
};

}  // namespace depengine

// BlockSource: where a MemoryPool gets its blocks from and gives them back to — host memory, or a device's memory
// through a stream backend. A slow path: the pool calls it only to grow or to trim.
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
  DeviceBlockSource(StreamBackend& backend, int device) noexcept : backend_(backend), device_(device) {}
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) override;
  void deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] std::size_t max_alignment() const noexcept override { return 256; }

 private:
  StreamBackend& backend_;
  int device_;
};

}  // namespace depengine

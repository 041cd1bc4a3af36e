#include <new>

#include <depengine/executors/stream/stream_backend.h>
#include <depengine/memory/block_source.h>

namespace depengine {

void* HostBlockSource::allocate(std::size_t bytes, std::size_t alignment) {
  return ::operator new (bytes, std::align_val_t{alignment});
}

void HostBlockSource::deallocate(void* block, std::size_t /*bytes*/, std::size_t alignment) noexcept {
  ::operator delete (block, std::align_val_t{alignment});
}

void* DeviceBlockSource::allocate(std::size_t bytes, std::size_t /*alignment*/) {
  return backend_.allocate(device_, bytes);
}

void DeviceBlockSource::deallocate(void* block, std::size_t /*bytes*/, std::size_t /*alignment*/) noexcept {
  backend_.deallocate(device_, block);
}

}  // namespace depengine

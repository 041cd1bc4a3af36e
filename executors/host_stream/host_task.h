// HostTask: the type-erased host function of one HostStreamBackend::launch(), stored in the stream's queue entry
// without allocation when small.
//
// A support::SmallFunction (support/small_function.h) called as fn(): a callable of at most kInlineBytes (48) bytes,
// alignment at most alignof(std::max_align_t), and a noexcept move constructor lives inline; any other is moved to the
// heap (one allocation per launch; HostTask::stored_inline<F>() says which). It is invoked once, on the stream's
// thread; what it returns is ignored and what it throws becomes the stream's sticky error. A lambda converts to it
// implicitly: launch(stream, [..] { .. }).
//
// Not thread-safe: a HostTask is owned by one queue entry, which one thread at a time holds. Move-only.
#pragma once

#include <depengine/support/small_function.h>

namespace depengine {

using HostTask = support::SmallFunction<void(), 48>;

}  // namespace depengine

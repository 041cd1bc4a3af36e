// support/: IntrusiveList, a FIFO of objects linked through a pointer member of their own.
//
// IntrusiveList<T, &T::next> links elements through T::next, so pushing and popping never allocate and an element
// can be handed from list to list (a var queue's grants, an executor's ready list) at the cost of two stores. An
// element is in at most one list per link member at a time; the list does not own its elements.
//
// Thread safety: none; a list is owned by one thread at a time (lists that threads share are guarded by their owner's
// lock). Cost: O(1) push_back, splice_back and pop_front; no allocation.
#pragma once

namespace depengine::support {

template <class T, T* T::*Next>
class IntrusiveList {
 public:
  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] T* front() const noexcept { return head_; }

  void push_back(T* element) noexcept {
    element->*Next = nullptr;
    if (tail_ != nullptr) {
      tail_->*Next = element;
    } else {
      head_ = element;
    }
    tail_ = element;
  }

  // Moves every element of `other` to the back of this list, in order, leaving `other` empty. O(1).
  void splice_back(IntrusiveList& other) noexcept {
    if (other.head_ == nullptr) return;
    if (tail_ != nullptr) {
      tail_->*Next = other.head_;
    } else {
      head_ = other.head_;
    }
    tail_ = other.tail_;
    other.head_ = nullptr;
    other.tail_ = nullptr;
  }

  // The first element, unlinked; null if the list is empty.
  [[nodiscard]] T* pop_front() noexcept {
    T* element = head_;
    if (element != nullptr) {
      head_ = element->*Next;
      if (head_ == nullptr) tail_ = nullptr;
    }
    return element;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
};

}  // namespace depengine::support

#include <catch2/catch.hpp>
#include <vector>

#include <depengine/support/intrusive_list.h>

namespace {

struct Node {
  int value = 0;
  Node* next = nullptr;
  Node* other_next = nullptr;
};

using List = depengine::support::IntrusiveList<Node, &Node::next>;
using OtherList = depengine::support::IntrusiveList<Node, &Node::other_next>;

std::vector<int> drain(List& list) {
  std::vector<int> values;
  while (Node* node = list.pop_front()) values.push_back(node->value);
  return values;
}

}  // namespace

TEST_CASE("IntrusiveList is a FIFO through the element's own link", "[support]") {
  Node a{1}, b{2}, c{3};
  List list;
  REQUIRE(list.empty());
  REQUIRE(list.pop_front() == nullptr);
  list.push_back(&a);
  list.push_back(&b);
  REQUIRE(list.front() == &a);
  REQUIRE(drain(list) == std::vector<int>{1, 2});
  REQUIRE(list.empty());
  // Emptied and refilled: the tail was reset with the head.
  list.push_back(&c);
  list.push_back(&a);
  REQUIRE(drain(list) == std::vector<int>{3, 1});
}

TEST_CASE("IntrusiveList: an element moves between lists, and lists of other links do not disturb it", "[support]") {
  Node a{1}, b{2};
  List first, second;
  OtherList other;
  first.push_back(&a);
  first.push_back(&b);
  other.push_back(&b);  // b is in `first` and `other` at once, through different links
  other.push_back(&a);
  second.push_back(first.pop_front());
  REQUIRE(drain(first) == std::vector<int>{2});
  REQUIRE(drain(second) == std::vector<int>{1});
  REQUIRE(other.pop_front() == &b);
  REQUIRE(other.pop_front() == &a);
  REQUIRE(other.empty());
}

TEST_CASE("IntrusiveList::splice_back appends a whole list in order and empties it", "[support]") {
  Node a{1}, b{2}, c{3}, d{4};
  List list, more, none;
  list.push_back(&a);
  more.push_back(&b);
  more.push_back(&c);
  list.splice_back(more);
  REQUIRE(more.empty());
  list.splice_back(none);  // an empty list changes nothing
  list.push_back(&d);      // the tail is the spliced list's last element
  REQUIRE(drain(list) == std::vector<int>{1, 2, 3, 4});
  more.push_back(&b);
  list.splice_back(more);  // into an empty list
  REQUIRE(list.front() == &b);
  list.push_back(&a);
  REQUIRE(drain(list) == std::vector<int>{2, 1});
}

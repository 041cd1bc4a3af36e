// A fixture for the API reference's test (docs/CMakeLists.txt): a Widget, documented as depengine's headers are, with
// plain // comments, but for one member that has none, which must fail the reference.
#pragma once

namespace fixture {

class Widget {
 public:
  // Documented: the filter hands this comment to Doxygen.
  int size() const;

  int undocumented() const;
  int count = 0;  // documented by its trailing comment
};

}  // namespace fixture

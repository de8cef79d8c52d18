// Tests write engine flags as words; fastrestartd keeps them as a FlagList read at its boundary. A word
// list a test writes is printable by construction: a control character in one is a test bug, reported
// as the failed conversion it is.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "supervisor/flags.h"

namespace fr::supervisor {

// gtest prints a FlagList by its words.
inline void PrintTo(const FlagList& f, std::ostream* os) { *os << ::testing::PrintToString(f.words()); }

namespace testing {

inline FlagList flags_of(std::vector<std::string> words) {
  auto f = FlagList::from_words(std::move(words), "test flags");
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? std::move(*f) : FlagList();
}

}  // namespace testing
}  // namespace fr::supervisor

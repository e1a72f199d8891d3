// A fresh random job token (CHORUS_TOKEN) so that a stray client, or a rank
// of another job on the same host, cannot join this job's store.
#pragma once

#include <cstdio>
#include <random>
#include <string>

namespace chorus::bootstrap {

inline std::string random_token() {
  std::random_device entropy;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof word, "%08x", entropy());
    token += word;
  }
  return token;
}

}  // namespace chorus::bootstrap

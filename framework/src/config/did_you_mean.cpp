// did_you_mean (wick/config.hpp): the closest known name to a mistyped one, for every "unknown
// key" message of the config, the optimizers and the commands.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "wick/config.hpp"

namespace wick {

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string a = lower(key);
  const std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, key.size() / 3));
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& cand : candidates) {
    // The distance is at least the difference in length: a candidate that far off cannot be
    // suggested, and skipping it saves the table, which for a 4 MiB key (the largest config
    // read) took 700 MB and 20 s (found with fuzz/).
    const std::size_t gap =
        a.size() > cand.size() ? a.size() - cand.size() : cand.size() - a.size();
    if (gap > limit) continue;
    const std::string b = lower(cand);
    // Levenshtein distance, with adjacent transpositions counted as one edit.
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
      for (std::size_t j = 1; j <= b.size(); ++j) {
        std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    std::size_t dist = d[a.size()][b.size()];
    if (dist < best_d) {
      best_d = dist;
      best = cand;
    }
  }
  return best_d <= limit ? best : std::string();
}

}  // namespace wick

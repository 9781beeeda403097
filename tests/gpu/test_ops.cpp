// Runs the op table (op_cases.cpp): `test_gpu_ops [OP...]` runs the rows and checks of the named
// ops (all without arguments), each row's kernel against its CPU op, and prints each op's row
// count and time. Exit 77 without a GPU, unless a host check failed. `test_gpu_ops --cover OP...`
// runs nothing: it fails unless the named ops are exactly the table's, so that the ctest groups
// (CMakeLists.txt) leave no op out.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "gpu_test.hpp"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test::ops;

std::set<std::string> table_ops(const std::vector<Row>& rows, const std::vector<Check>& checks) {
  std::set<std::string> ops;
  for (const Row& r : rows) ops.insert(op_name(r.op));
  for (const Check& c : checks) ops.insert(c.op);
  return ops;
}

// --cover: every op of the table named once, nothing else.
int cover(const std::set<std::string>& ops, const std::vector<std::string>& named) {
  int bad = 0;
  std::map<std::string, int> count;
  for (const std::string& n : named) ++count[n];
  for (const std::string& op : ops)
    if (count[op] != 1) {
      std::printf("FAIL op %s is in %d ctest groups, not 1\n", op.c_str(), count[op]);
      ++bad;
    }
  for (const std::string& n : named)
    if (ops.count(n) == 0) {
      std::printf("FAIL %s is not an op of the table\n", n.c_str());
      ++bad;
    }
  if (bad == 0) std::printf("PASS: the ctest groups cover the table's %zu ops\n", ops.size());
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Row> rows = op_cases();
  const std::vector<Check> checks = op_checks();
  const std::set<std::string> ops = table_ops(rows, checks);
  std::vector<std::string> named(argv + 1, argv + argc);
  if (!named.empty() && named[0] == "--cover") return cover(ops, {named.begin() + 1, named.end()});
  for (const std::string& n : named)
    if (ops.count(n) == 0) {
      std::printf("FAIL: %s is not an op of the table\n", n.c_str());
      return 1;
    }
  const auto selected = [&named](const std::string& op) {
    return named.empty() || std::find(named.begin(), named.end(), op) != named.end();
  };

  int host = 0;
  for (const Check& c : checks)
    if (selected(c.op) && c.host != nullptr) host += c.host();
  return layertap::gpu_test::run_kernel_test(host, [&](cudaStream_t stream) {
    int failures = 0;
    std::map<std::string, std::pair<int, double>> done;  // op: rows, seconds (checks included)
    const auto timed = [&done](const std::string& op, int n, auto&& f) {
      const auto t0 = std::chrono::steady_clock::now();
      const int fails = f();
      done[op].first += n;
      done[op].second += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return fails;
    };
    for (const Row& r : rows)
      if (selected(op_name(r.op)))
        failures += timed(op_name(r.op), 1, [&] { return std::visit([&](const auto& c) { return run(c, r.seed, stream); }, r.op); });
    for (const Check& c : checks)
      if (selected(c.op) && c.device != nullptr) failures += timed(c.op, 0, [&] { return c.device(stream); });
    for (const auto& d : done) std::printf("op %-16s %3d rows %7.2f s\n", d.first.c_str(), d.second.first, d.second.second);
    return failures;
  });
}

#include "stats_plugin.h"

#include <cstdio>
#include <cstdlib>

#include <oclgrind/KernelInvocation.h>

namespace clproj {

StatsPlugin::StatsPlugin(const oclgrind::Context *context) : oclgrind::Plugin(context) {
  const char *out = std::getenv("CLPROJ_STATS_OUT");
  if (out != nullptr) output_path_ = out;
}

void StatsPlugin::instructionExecuted(const oclgrind::WorkItem *, const llvm::Instruction *,
                                      const oclgrind::TypedValue &) {
  instructions_.fetch_add(1, std::memory_order_relaxed);
}

void StatsPlugin::kernelBegin(const oclgrind::KernelInvocation *) { instructions_ = 0; }

void StatsPlugin::kernelEnd(const oclgrind::KernelInvocation *) {
  if (output_path_.empty()) return;
  FILE *f = std::fopen(output_path_.c_str(), "a");
  if (f == nullptr) return;
  std::fprintf(f, "{\"instructions\": %llu}\n", instructions_.load());
  std::fclose(f);
}

}  // namespace clproj

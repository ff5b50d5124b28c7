// StatsPlugin: device-independent kernel statistics collected while Oclgrind runs.
#pragma once
#include <atomic>
#include <string>

#include <oclgrind/Plugin.h>

namespace clproj {

class StatsPlugin : public oclgrind::Plugin {
 public:
  explicit StatsPlugin(const oclgrind::Context *context);
  void instructionExecuted(const oclgrind::WorkItem *workItem, const llvm::Instruction *instruction,
                           const oclgrind::TypedValue &result) override;
  void kernelBegin(const oclgrind::KernelInvocation *kernelInvocation) override;
  void kernelEnd(const oclgrind::KernelInvocation *kernelInvocation) override;

 private:
  std::atomic<unsigned long long> instructions_{0};
  std::string output_path_;
};

}  // namespace clproj

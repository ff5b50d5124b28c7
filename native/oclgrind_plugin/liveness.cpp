// Static estimate of per-work-item private state (register pressure proxy).
//
// private bytes = alloca bytes (private arrays/spills the compiler kept in memory)
//               + the maximum, over program points of the kernel function, of the
//                 bytes of live SSA values (each value rounded up to 4-byte registers).
// Liveness is the textbook backward data-flow over basic blocks, with phi operands
// live out of the matching predecessor. Kernel arguments count as values.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <llvm/IR/CFG.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

#include "stats_plugin.h"

namespace clproj {

namespace {
using ValueSet = std::unordered_set<const llvm::Value *>;

bool tracked(const llvm::Value *v) {
  if (v->getType()->isVoidTy() || v->getType()->isLabelTy() || v->getType()->isMetadataTy())
    return false;
  if (llvm::isa<llvm::AllocaInst>(v)) return false;  // counted as alloca bytes
  return llvm::isa<llvm::Instruction>(v) || llvm::isa<llvm::Argument>(v);
}
}  // namespace

PrivateEstimate estimatePrivate(const llvm::Function *fn) {
  PrivateEstimate est;
  if (fn == nullptr || fn->isDeclaration()) return est;
  const llvm::DataLayout &dl = fn->getParent()->getDataLayout();
  auto bytes = [&](const llvm::Value *v) -> uint64_t {
    uint64_t b = dl.getTypeStoreSize(v->getType()).getFixedSize();
    return std::max<uint64_t>(4, (b + 3) / 4 * 4);
  };

  std::unordered_map<const llvm::BasicBlock *, ValueSet> use, def, in, out;
  for (const llvm::BasicBlock &bb : *fn) {
    ValueSet &u = use[&bb], &d = def[&bb];
    for (const llvm::Instruction &inst : bb) {
      if (auto *ai = llvm::dyn_cast<llvm::AllocaInst>(&inst)) {
        uint64_t n = 1;
        if (auto *c = llvm::dyn_cast<llvm::ConstantInt>(ai->getArraySize())) n = c->getZExtValue();
        est.alloca_bytes += dl.getTypeAllocSize(ai->getAllocatedType()).getFixedSize() * n;
      }
      if (!llvm::isa<llvm::PHINode>(inst)) {
        for (const llvm::Value *op : inst.operands())
          if (tracked(op) && !d.count(op)) u.insert(op);
      }
      if (tracked(&inst)) {
        d.insert(&inst);
        est.ssa_values++;
      }
    }
  }
  // Arguments are live from the entry block on.
  const llvm::BasicBlock *entry = &fn->getEntryBlock();

  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = fn->begin(); it != fn->end(); ++it) {
      const llvm::BasicBlock *bb = &*it;
      ValueSet newOut;
      for (const llvm::BasicBlock *succ : llvm::successors(bb)) {
        for (const llvm::Value *v : in[succ]) newOut.insert(v);
        for (const llvm::PHINode &phi : succ->phis()) {
          newOut.erase(&phi);
          const llvm::Value *inc = phi.getIncomingValueForBlock(bb);
          if (inc != nullptr && tracked(inc)) newOut.insert(inc);
        }
      }
      ValueSet newIn = use[bb];
      for (const llvm::Value *v : newOut)
        if (!def[bb].count(v)) newIn.insert(v);
      // phis are defined at block entry but keep them in live-in so predecessors can drop them
      for (const llvm::PHINode &phi : bb->phis()) newIn.insert(&phi);
      if (newOut.size() != out[bb].size() || newIn.size() != in[bb].size()) changed = true;
      out[bb] = std::move(newOut);
      in[bb] = std::move(newIn);
    }
  }

  for (const llvm::BasicBlock &bb : *fn) {
    ValueSet live = out[&bb];
    auto measure = [&]() {
      uint64_t total = 0;
      for (const llvm::Value *v : live) total += bytes(v);
      if (total > est.max_live_bytes) est.max_live_bytes = total;
      est.max_live_values = std::max<uint64_t>(est.max_live_values, live.size());
    };
    measure();
    for (auto it = bb.rbegin(); it != bb.rend(); ++it) {
      const llvm::Instruction &inst = *it;
      live.erase(&inst);
      if (!llvm::isa<llvm::PHINode>(inst))
        for (const llvm::Value *op : inst.operands())
          if (tracked(op)) live.insert(op);
      measure();
    }
    if (&bb == entry) {
      for (const llvm::Argument &arg : fn->args()) live.insert(&arg);
      measure();
    }
  }
  return est;
}

}  // namespace clproj

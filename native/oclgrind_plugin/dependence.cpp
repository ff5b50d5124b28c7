// Dependence chains and per-work-item line transactions (docs/miniemu.md, "Dependence").
//
// Why: a throughput model prices bytes and instructions, but a work-item whose memory
// operations wait on each other (y[j] += A[i][j] * x[i] over i: every load of y[j] waits
// for the store of the previous iteration; p = next[p]: every address comes from the
// previous load) takes at least `chain x memory latency`, whatever the bandwidth. This
// file measures, per work-item, the longest such chain, device-independently:
//
// * every global load is one memory round trip; a load is *dependent* when it reads a
//   4-byte word this work-item stored earlier (read-after-write through memory) or when
//   its address operand was computed from a loaded value (pointer chasing). Values carry
//   their dependence through registers: an instruction's chain is the element-wise max of
//   its operands' (a phi takes the operand of the block it came from); a store gives the
//   words it writes the chain of its value and address.
// * a load also waits for every earlier store of the work-item to a buffer it may alias
//   (program order: a compiler cannot hoist a load above a store it cannot prove
//   disjoint, so the GPU issues the load of iteration k+1 only after the store of
//   iteration k, which waited for the loads of iteration k). Two pointers are disjoint
//   only when they come from different kernel arguments one of which is `restrict`
//   (LLVM noalias) or from different address spaces.
// * a dependent load starts a new round: chain = 1 + max(address chain, stored-word chain,
//   chain of the may-alias stores before it). Independent loads are round 1. The chain of
//   a work-item is the max over its loads.
// * a round is *cold* when, since the previous round, a global load of this work-item
//   touched a 32-byte sector other than the one its instruction touched the time before
//   (streaming in new data: the round waits for the memory system, not the L1). The same
//   is counted for 64- and 128-byte segments: a memory system that fetches 64 bytes per
//   access has the second sector of a row walk in L2 already, so only rounds cold at the
//   device's access granularity wait for DRAM.
//
// The same per-(work-item, instruction) history gives *item transactions*: accesses that
// touch a segment (32/64/128 B) other than the previous access of that instruction by that
// work-item. On a CPU, PoCL runs a looping work-item to its end before the next one, so
// this, not the warp-level coalescing, is the number of cache lines the core must fetch.
//
// Simplifications (documented in docs/miniemu.md): local/private memory and atomics
// neither add rounds nor carry chains through memory; a value is tracked by its LLVM
// instruction, so a value that lives in memory between work-items is not followed.
//
// The same propagation counts the work-item's longest chain of dependent floating-point
// operations (`fp`, and how many of them are fused multiply-adds, `fma`, whose latency
// is longer than an add's): through registers (a loop's accumulator phi) and through stored
// words (`tmp[i] += ...` reloaded every trip), not through mere store->load ordering (a
// load behind a store waits for the store's address, not for the value being computed).
// A loop that accumulates runs no faster than one such operation per trip, whatever the
// throughput (the recurrence bound of a loop): on a CPU core that runs a work-item's
// loop to its end, this chain is its time.
#include <algorithm>
#include <cstdint>

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Argument.h>
#include <llvm/IR/Instructions.h>

#include "stats_plugin.h"

namespace clproj {

void Dep::merge(const Dep &o) {
  mem = std::max(mem, o.mem);
  for (int k = 0; k < kNumSegments; ++k) cold[k] = std::max(cold[k], o.cold[k]);
  raw = std::max(raw, o.raw);
  ptr = std::max(ptr, o.ptr);
  // the longer floating-point path (with equal lengths: more multiply-adds, then reloads)
  if (o.fp > fp || (o.fp == fp && (o.fma > fma || (o.fma == fma && o.reload > reload)))) {
    fp = o.fp;
    fma = o.fma;
    reload = o.reload;
  }
}

namespace {

// The pointer operand of a global load or store (vload/vstore: the last argument).
const llvm::Value *pointerOperand(const llvm::Instruction *inst) {
  if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(inst)) return ld->getPointerOperand();
  if (auto *st = llvm::dyn_cast<llvm::StoreInst>(inst)) return st->getPointerOperand();
  if (auto *call = llvm::dyn_cast<llvm::CallInst>(inst))
    if (call->arg_size() > 0) {
      const llvm::Value *last = call->getArgOperand(call->arg_size() - 1);
      if (last->getType()->isPointerTy()) return last;
    }
  return nullptr;
}

}  // namespace

bool DependenceTracker::mayAlias(uint32_t a, uint32_t b) const {
  const MemObject &x = objects_[a], &y = objects_[b];
  if (x.object == nullptr || y.object == nullptr || x.object == y.object) return true;
  const bool args = llvm::isa<llvm::Argument>(x.object) && llvm::isa<llvm::Argument>(y.object);
  return !(args && (x.noalias || y.noalias));
}

void DependenceTracker::reset() {
  ids_.clear();
  operands_.clear();
  objects_.clear();
  lanes_.clear();
}

void DependenceTracker::groupBegin(size_t lanes) {
  for (LaneDeps &l : lanes_) {
    l.val.clear();
    l.last_end.clear();
    l.stored.clear();
    l.fences.clear();
    l.pending = Dep();
    l.has_pending = l.pending_raw = l.pending_reload = false;
    l.pending_cold = l.cold_since = 0;
    l.stores = 0;
    l.longest = Dep();
  }
  lanes_.resize(lanes);
  raw_loads_ = pointer_loads_ = 0;
  for (auto &d : item_tx_)
    for (auto &s : d) s = 0;
}

uint32_t DependenceTracker::idOf(const llvm::Value *v) {
  auto it = ids_.find(v);
  if (it != ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(ids_.size());
  ids_.emplace(v, id);
  return id;
}

uint32_t DependenceTracker::assign(const llvm::Instruction *inst) {
  uint32_t id = idOf(inst);
  // Only instruction operands can carry a chain (arguments and constants are ready).
  std::vector<uint32_t> ops;
  ops.reserve(inst->getNumOperands());
  uint32_t top = id;
  for (const llvm::Value *op : inst->operands()) {
    ops.push_back(llvm::isa<llvm::Instruction>(op) ? idOf(op) : kNoId);
    if (ops.back() != kNoId) top = std::max(top, ops.back());
  }
  // Size the table before storing into it: growing it moves the rows (a reference into it
  // taken earlier would dangle).
  if (operands_.size() <= top) operands_.resize(top + 1);
  operands_[id] = std::move(ops);
  if (objects_.size() < operands_.size()) objects_.resize(operands_.size());
  if (const llvm::Value *ptr = pointerOperand(inst)) {
    const llvm::Value *object = llvm::getUnderlyingObject(ptr);
    const auto *arg = llvm::dyn_cast<llvm::Argument>(object);
    objects_[id] = MemObject{object, arg != nullptr && arg->hasNoAliasAttr()};
  }
  return id;
}

LaneDeps &DependenceTracker::lane(uint32_t lid) {
  if (lid >= lanes_.size()) lanes_.resize(lid + 1);
  LaneDeps &l = lanes_[lid];
  if (l.val.size() < ids_.size()) {
    l.val.resize(ids_.size() + 64);
    l.last_end.resize(ids_.size() + 64, 0);
  }
  return l;
}

Dep DependenceTracker::operandDep(LaneDeps &l, const llvm::Instruction *inst, uint32_t id,
                                  const llvm::BasicBlock *previous) const {
  Dep d;
  if (id >= operands_.size()) return d;
  const std::vector<uint32_t> &ops = operands_[id];
  if (auto *phi = llvm::dyn_cast<llvm::PHINode>(inst)) {
    // The value that flowed in from the block executed before this one.
    for (unsigned i = 0; i < phi->getNumIncomingValues() && i < ops.size(); ++i)
      if (phi->getIncomingBlock(i) == previous) {
        if (ops[i] != kNoId && ops[i] < l.val.size()) d = l.val[ops[i]];
        break;
      }
    return d;
  }
  for (uint32_t op : ops)
    if (op != kNoId && op < l.val.size()) d.merge(l.val[op]);
  return d;
}

void DependenceTracker::countSegments(LaneDeps &l, uint32_t id, uint64_t addr, size_t size,
                                      int store, uint8_t &cold) {
  uint64_t last_end = id < l.last_end.size() ? l.last_end[id] : 0;
  uint64_t end = addr + size;  // one past the last byte
  for (int s = 0; s < kNumSegments; ++s) {
    uint64_t first = addr >> kSegmentShift[s], last = (end - 1) >> kSegmentShift[s];
    uint64_t n = last - first + 1;
    if (last_end != 0) {
      uint64_t prev = (last_end - 1) >> kSegmentShift[s];
      if (prev >= first && prev <= last) n -= 1;  // still in the segment touched before
    }
    item_tx_[store][s] += n;
    if (n > 0) cold |= static_cast<uint8_t>(1u << s);  // a new segment of this size
  }
  if (id < l.last_end.size()) l.last_end[id] = end;
}

void DependenceTracker::load(uint32_t lid, uint32_t id, uint64_t addr, size_t size) {
  LaneDeps &l = lane(lid);
  uint8_t cold = 0;
  countSegments(l, id, addr, size, 0, cold);
  uint64_t stored_when = UINT64_MAX;  // the store clock of the oldest word read back
  for (uint64_t w = addr / 4; w <= (addr + size - 1) / 4; ++w) {
    auto it = l.stored.find(w);
    if (it != l.stored.end()) {
      l.pending.merge(it->second.dep);
      l.pending_raw = true;
      stored_when = std::min(stored_when, it->second.when);
    }
  }
  for (const auto &fence : l.fences)  // earlier stores this load may not pass
    if (id < objects_.size() && mayAlias(id, fence.id)) {
      Dep ordered = fence.dep;
      ordered.fp = ordered.fma = ordered.reload = 0;  // ordering, not data
      l.pending.merge(ordered);
      // A store that may alias the word, after the word was stored: a compiler cannot
      // forward the stored value in a register, the load goes to memory (store buffer).
      if (stored_when != UINT64_MAX && fence.last > stored_when) l.pending_reload = true;
    }
  l.pending_cold |= cold;
  l.has_pending = true;
}

void DependenceTracker::store(uint32_t lid, const llvm::Instruction *inst, uint32_t id,
                              uint64_t addr, size_t size, const llvm::BasicBlock *previous) {
  LaneDeps &l = lane(lid);
  uint8_t cold = 0;  // stores stream in nothing a dependent round waits for
  countSegments(l, id, addr, size, 1, cold);
  Dep d = operandDep(l, inst, id, previous);  // value and address (and vstore's offset)
  const uint64_t when = ++l.stores;
  for (uint64_t w = addr / 4; w <= (addr + size - 1) / 4; ++w) l.stored[w] = StoredWord{d, when};
  // One fence per stored-to instruction (its buffer): later loads that may alias wait.
  for (auto &fence : l.fences)
    if (fence.id == id) {
      fence.dep.merge(d);
      fence.last = when;
      return;
    }
  l.fences.push_back(Fence{id, d, when});
}

void DependenceTracker::executed(uint32_t lid, const llvm::Instruction *inst, uint32_t id,
                                 const llvm::BasicBlock *previous, bool fp_op, bool fma_op) {
  LaneDeps &l = lane(lid);
  Dep d = operandDep(l, inst, id, previous);
  if (l.has_pending) {  // this instruction loaded global memory (memoryLoad came first)
    const bool pointer = d.mem > 0;  // its address was computed from a loaded value
    const bool raw = l.pending_raw;
    const bool ordered = l.pending.mem > 0;  // behind a store (or a stored word) with a chain
    d.merge(l.pending);
    if (pointer || raw || ordered) {
      d.mem += 1;
      const uint8_t cold = l.cold_since | l.pending_cold;
      for (int k = 0; k < kNumSegments; ++k) d.cold[k] += (cold >> k) & 1u;
      d.raw += raw ? 1 : 0;
      d.ptr += pointer ? 1 : 0;
      d.reload += (raw && l.pending_reload) ? 1 : 0;
      l.cold_since = 0;
      raw_loads_ += raw ? 1 : 0;
      pointer_loads_ += pointer ? 1 : 0;
    } else {
      d = Dep();
      d.mem = 1;
      for (int k = 0; k < kNumSegments; ++k) d.cold[k] = (l.pending_cold >> k) & 1u;
      l.cold_since |= l.pending_cold;
    }
    l.longest.merge(d);
    l.pending = Dep();
    l.has_pending = l.pending_raw = l.pending_reload = false;
    l.pending_cold = 0;
  }
  if (fp_op) {
    d.fp += 1;
    d.fma += fma_op ? 1 : 0;
    if (d.fp > l.longest.fp) {
      l.longest.fp = d.fp;
      l.longest.fma = d.fma;
      l.longest.reload = d.reload;
    }
  }
  if (id < l.val.size()) l.val[id] = d;
}

void DependenceTracker::finish(Stats &s) const {
  for (const LaneDeps &l : lanes_) {
    s.dep_chain += l.longest.mem;
    for (int k = 0; k < kNumSegments; ++k) s.dep_cold[k] += l.longest.cold[k];
    s.dep_raw += l.longest.raw;
    s.dep_ptr += l.longest.ptr;
    s.dep_fp += l.longest.fp;
    s.dep_fma += l.longest.fma;
    s.dep_fp_reload += l.longest.reload;
  }
  s.dep_raw_loads = raw_loads_;
  s.dep_ptr_loads = pointer_loads_;
  for (int d = 0; d < 2; ++d)
    for (int k = 0; k < kNumSegments; ++k) s.item_tx[d][k] = item_tx_[d][k];
}

}  // namespace clproj

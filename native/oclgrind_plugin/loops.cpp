// Loop analysis for bounded emulation (docs/miniemu.md, "Bounded emulation").
//
// For every loop of the kernel function (LLVM LoopInfo, preorder) we report the
// backedge-taken count that ScalarEvolution derives, as a small JSON expression tree
// over constants and kernel arguments, so that the Python side can evaluate it with
// the launch's actual (or probe) argument values:
//   {"c":V,"bits":W}                   constant (V signed)
//   {"arg":I,"bits":W}                 kernel argument I
//   {"gid":D,"bits":W}                 get_global_id(D) of the work-item
//   {"gsize":D,"bits":W}               get_global_size(D) of the launch (likewise
//   {"lsize":D,...}, {"ngroups":D,...}  get_local_size(D), get_num_groups(D))
//   {"op":O,"bits":W,"ops":[...]}      O in add, mul, udiv, umax, smax, umin, smin,
//                                      zext, sext, trunc
//   {"unknown":"..."}                  anything else (other builtins, loads, recurrences)
// "exact" is the exact count (null when SCEV cannot compute it), "max" the symbolic
// maximum (an upper bound, e.g. from `i < maxit` in a loop that also exits on data).
// Where SCEV computes no exact count, strideCount derives one for the grid-stride loop
// (`for (i = gid; i < n; i += get_global_size(0))`) and marks it "derived":"stride".
// The header's terminator executes once per iteration (backedge-taken count + 1 per
// loop entry): the plugin counts it at run time (loop_iterations). "header_exits" says
// whether the header tests the exit ahead of the body (the body, and a loop nested in it,
// then runs once less per entry than the header).
#include <sstream>

#include <llvm/ADT/Triple.h>
#include <llvm/Analysis/AssumptionCache.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Module.h>

#include "stats_plugin.h"

namespace clproj {

namespace {

std::string esc(const std::string &s) {
  std::string out;
  for (char c : s)
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) out += c;
  return out.substr(0, 60);
}

// The JSON leaf of a call to a work-item builtin with a constant dimension, or nullptr.
const char *workItemLeaf(const llvm::CallInst *call) {
  using namespace llvm;
  const Function *callee = call ? call->getCalledFunction() : nullptr;
  if (callee == nullptr || call->arg_size() != 1 || !isa<ConstantInt>(call->getArgOperand(0)))
    return nullptr;
  StringRef name = callee->getName();
  if (name.contains("get_global_id")) return "gid";
  if (name.contains("get_global_size")) return "gsize";
  if (name.contains("get_local_size")) return "lsize";
  if (name.contains("get_num_groups")) return "ngroups";
  return nullptr;
}

std::string scevJson(const llvm::SCEV *s, int depth = 0) {
  using namespace llvm;
  std::ostringstream o;
  if (depth > 24) return "{\"unknown\":\"too deep\"}";
  unsigned bits = s->getType()->isIntegerTy() ? s->getType()->getIntegerBitWidth() : 64;
  auto nary = [&](const char *op, const SCEVNAryExpr *e) {
    o << "{\"op\":\"" << op << "\",\"bits\":" << bits << ",\"ops\":[";
    for (unsigned i = 0; i < e->getNumOperands(); ++i)
      o << (i ? "," : "") << scevJson(e->getOperand(i), depth + 1);
    o << "]}";
  };
  switch (s->getSCEVType()) {
    case scConstant:
      o << "{\"c\":" << cast<SCEVConstant>(s)->getAPInt().getSExtValue() << ",\"bits\":" << bits
        << "}";
      break;
    case scUnknown: {
      const Value *v = cast<SCEVUnknown>(s)->getValue();
      const auto *call = dyn_cast<CallInst>(v);
      if (auto *a = dyn_cast<Argument>(v))
        o << "{\"arg\":" << a->getArgNo() << ",\"bits\":" << bits << "}";
      else if (const char *leaf = workItemLeaf(call))
        // A trip count that depends on the work-item (a triangular nest: `for (j2 = j1; ...)`
        // with j1 = get_global_id(0)) or on the launch's shape (a grid-stride loop's step,
        // get_global_size(0)): Python evaluates it with the launch's NDRange and ids.
        o << "{\"" << leaf << "\":" << cast<ConstantInt>(call->getArgOperand(0))->getZExtValue()
          << ",\"bits\":" << bits << "}";
      else {
        std::string name;
        raw_string_ostream ns(name);
        v->printAsOperand(ns, false);
        o << "{\"unknown\":\"" << esc(ns.str()) << "\"}";
      }
      break;
    }
    case scTruncate:
    case scZeroExtend:
    case scSignExtend: {
      const char *op = s->getSCEVType() == scTruncate     ? "trunc"
                       : s->getSCEVType() == scZeroExtend ? "zext"
                                                          : "sext";
      o << "{\"op\":\"" << op << "\",\"bits\":" << bits << ",\"ops\":["
        << scevJson(cast<SCEVCastExpr>(s)->getOperand(), depth + 1) << "]}";
      break;
    }
    case scAddExpr: nary("add", cast<SCEVNAryExpr>(s)); break;
    case scMulExpr: nary("mul", cast<SCEVNAryExpr>(s)); break;
    case scUMaxExpr: nary("umax", cast<SCEVNAryExpr>(s)); break;
    case scSMaxExpr: nary("smax", cast<SCEVNAryExpr>(s)); break;
    case scUMinExpr:
    case scSequentialUMinExpr: nary("umin", cast<SCEVNAryExpr>(s)); break;
    case scSMinExpr: nary("smin", cast<SCEVNAryExpr>(s)); break;
    case scUDivExpr: {
      auto *d = cast<SCEVUDivExpr>(s);
      o << "{\"op\":\"udiv\",\"bits\":" << bits << ",\"ops\":[" << scevJson(d->getLHS(), depth + 1)
        << "," << scevJson(d->getRHS(), depth + 1) << "]}";
      break;
    }
    default: o << "{\"unknown\":\"recurrence or pointer\"}"; break;
  }
  return o.str();
}

// Whether every leaf of ``s`` is a launch-size builtin, a kernel argument or a constant
// combined by +, *, casts: a loop-invariant step whose value Python can evaluate.
bool evaluableStep(const llvm::SCEV *s, int depth = 0) {
  using namespace llvm;
  if (depth > 8) return false;
  switch (s->getSCEVType()) {
    case scConstant: return true;
    case scUnknown: {
      const Value *v = cast<SCEVUnknown>(s)->getValue();
      if (isa<Argument>(v)) return true;
      const char *leaf = workItemLeaf(dyn_cast<CallInst>(v));
      return leaf != nullptr && std::string(leaf) != "gid";
    }
    case scTruncate:
    case scZeroExtend:
    case scSignExtend:
      return evaluableStep(cast<SCEVCastExpr>(s)->getOperand(), depth + 1);
    case scAddExpr:
    case scMulExpr:
      for (const SCEV *op : cast<SCEVNAryExpr>(s)->operands())
        if (!evaluableStep(op, depth + 1)) return false;
      return true;
    default: return false;
  }
}

// Start S and step D of ``v`` when it is an induction variable of ``loop`` that goes up by a
// loop-invariant D each iteration; ``v`` is the header's phi or its incremented value
// (S then counts the first increment). An affine recurrence of SCEV's, or else, read off
// the IR, a phi whose increment adds a work-item size builtin: a call that the compiler
// left inside the loop (BabelStream's dot, built at -Os) is no recurrence to SCEV, but
// returns the same value at every call (the OpenCL C specification).
bool induction(llvm::Loop *loop, llvm::ScalarEvolution &se, llvm::Value *v, const llvm::SCEV *&start,
               const llvm::SCEV *&step) {
  using namespace llvm;
  if (const auto *rec = dyn_cast<SCEVAddRecExpr>(se.getSCEV(v))) {
    if (rec->getLoop() != loop || !rec->isAffine()) return false;
    start = rec->getStart();
    step = rec->getStepRecurrence(se);
    return true;
  }
  BasicBlock *latch = loop->getLoopLatch();
  if (latch == nullptr) return false;
  auto *phi = dyn_cast<PHINode>(v);
  bool post = false;
  if (phi == nullptr || phi->getParent() != loop->getHeader()) {
    auto *add = dyn_cast<BinaryOperator>(v);
    if (add == nullptr || add->getOpcode() != Instruction::Add) return false;
    for (Value *operand : add->operands())
      if (auto *p = dyn_cast<PHINode>(operand))
        if (p->getParent() == loop->getHeader()) phi = p;
    post = true;
  }
  if (phi == nullptr || phi->getNumIncomingValues() != 2 || phi->getBasicBlockIndex(latch) < 0)
    return false;
  Value *next = phi->getIncomingValueForBlock(latch);
  auto *add = dyn_cast<BinaryOperator>(next);
  if (add == nullptr || add->getOpcode() != Instruction::Add || (post && v != next)) return false;
  Value *inc = add->getOperand(0) == phi   ? add->getOperand(1)
               : add->getOperand(1) == phi ? add->getOperand(0)
                                           : nullptr;
  if (inc == nullptr) return false;
  step = se.getSCEV(inc);
  start = se.getSCEV(phi->getIncomingValue(1 - phi->getBasicBlockIndex(latch)));
  if (post) start = se.getAddExpr(start, step);
  return true;
}

// The backedge-taken count of a loop that SCEV gives up on: the grid-stride loop
// `for (i = gid; i < n; i += get_global_size(0))` of reductions (BabelStream's dot),
// whose step SCEV does not see as loop-invariant or cannot prove positive, so that
// bounded emulation had no trip count and projected a budget's worth of iterations (470x
// too few for a 400 MiB dot on 32 work-items). Taken where the loop leaves through one
// conditional branch, in its header or its latch (evaluated once per iteration), on an
// integer compare of an induction variable (S, D) with a loop-invariant bound B,
// continuing while S + k*D < B (or <= B): the backedge is then taken ceil((B - S) / D)
// times when S < B, else never. D must be positive: the work-item size builtins are >= 1,
// and Python refuses a step that evaluates to zero or to a negative signed value
// ("derived":"stride" marks the count and "step" gives D, miniemu/scev.py). Returns ""
// where the shape differs, else the count, with D in ``step_json``.
std::string strideCount(llvm::Loop *loop, llvm::ScalarEvolution &se, std::string &step_json) {
  using namespace llvm;
  BasicBlock *exiting = loop->getExitingBlock();
  if (exiting == nullptr || (exiting != loop->getHeader() && exiting != loop->getLoopLatch()))
    return "";
  auto *br = dyn_cast<BranchInst>(exiting->getTerminator());
  if (br == nullptr || !br->isConditional()) return "";
  auto *cmp = dyn_cast<ICmpInst>(br->getCondition());
  if (cmp == nullptr || !cmp->getOperand(0)->getType()->isIntegerTy()) return "";
  CmpInst::Predicate pred = cmp->getPredicate();  // the loop goes on while this holds
  if (!loop->contains(br->getSuccessor(0))) pred = CmpInst::getInversePredicate(pred);
  Value *iv = cmp->getOperand(0), *bound = cmp->getOperand(1);
  const SCEV *start = nullptr, *step = nullptr;
  if (!induction(loop, se, iv, start, step)) {
    std::swap(iv, bound);
    pred = CmpInst::getSwappedPredicate(pred);
    if (!induction(loop, se, iv, start, step)) return "";
  }
  const SCEV *limit = se.getSCEV(bound);
  if (!se.isLoopInvariant(limit, loop) || !evaluableStep(step)) return "";
  if (const auto *c = dyn_cast<SCEVConstant>(step))
    if (!c->getAPInt().isStrictlyPositive()) return "";
  bool inclusive = false;
  switch (pred) {
    case CmpInst::ICMP_ULT:
    case CmpInst::ICMP_SLT: break;
    case CmpInst::ICMP_ULE:
    case CmpInst::ICMP_SLE: inclusive = true; break;
    default: return "";
  }
  const std::string w = std::to_string(cmp->getOperand(0)->getType()->getIntegerBitWidth());
  auto c = [&](long v) { return "{\"c\":" + std::to_string(v) + ",\"bits\":" + w + "}"; };
  auto op = [&](const char *name, const std::string &ops) {
    return "{\"op\":\"" + std::string(name) + "\",\"bits\":" + w + ",\"ops\":[" + ops + "]}";
  };
  const std::string d = scevJson(step);
  // B - S (+ 1 for <=): negative when the loop is left at its first test
  std::string left = scevJson(limit) + "," + op("mul", c(-1) + "," + scevJson(start));
  if (inclusive) left += "," + c(1);
  const std::string count =
      op("udiv", op("add", op("smax", op("add", left) + "," + c(0)) + "," + d + "," + c(-1)) +
                     "," + d);
  if (count.find("unknown") != std::string::npos) return "";
  step_json = d;
  return count;
}

}  // namespace

std::string analyzeLoops(const llvm::Function *function,
                         std::unordered_map<const llvm::Instruction *, int> &headers) {
  using namespace llvm;
  headers.clear();
  if (function == nullptr || function->isDeclaration()) return "[]";
  Function &f = const_cast<Function &>(*function);  // analyses read the IR, never change it
  DominatorTree dt(f);
  LoopInfo li(dt);
  TargetLibraryInfoImpl tlii(Triple(f.getParent()->getTargetTriple()));
  TargetLibraryInfo tli(tlii);
  AssumptionCache ac(f);
  ScalarEvolution se(f, tli, ac, dt, li);
  std::ostringstream o;
  o << "[";
  int index = 0;
  std::unordered_map<const Loop *, int> ids;
  for (Loop *loop : li.getLoopsInPreorder()) {
    if (index >= kMaxLoops) break;
    ids[loop] = index;
    const Instruction *term = loop->getHeader()->getTerminator();
    headers[term] = index;
    const SCEV *exact = se.getBackedgeTakenCount(loop);
    const SCEV *max = se.getSymbolicMaxBackedgeTakenCount(loop);
    std::string step;
    std::string derived = isa<SCEVCouldNotCompute>(exact) ? strideCount(loop, se, step) : "";
    int parent = loop->getParentLoop() ? ids[loop->getParentLoop()] : -1;
    o << (index ? "," : "") << "{\"id\":" << index << ",\"depth\":" << loop->getLoopDepth()
      << ",\"parent\":" << parent << ",\"blocks\":" << loop->getNumBlocks() << ",\"exact\":"
      << (!derived.empty()                  ? derived
          : isa<SCEVCouldNotCompute>(exact) ? std::string("null")
                                            : scevJson(exact))
      << ",\"max\":" << (isa<SCEVCouldNotCompute>(max) ? std::string("null") : scevJson(max));
    if (!derived.empty()) o << ",\"derived\":\"stride\",\"step\":" << step;
    // A header that tests the exit before the body (a loop left unrotated: the body then
    // runs backedge-taken-count times per entry, one less than the header), as opposed to
    // a rotated loop whose exit test ends the body (the body runs with every header).
    const BasicBlock *header = loop->getHeader();
    bool headerExits = loop->isLoopExiting(header) && header != loop->getLoopLatch();
    o << ",\"header_exits\":" << (headerExits ? "true" : "false");
    o << "}";
    ++index;
  }
  o << "]";
  return o.str();
}

bool hasBarrier(const llvm::Function *function) {
  using namespace llvm;
  if (function == nullptr) return true;
  for (const BasicBlock &bb : *function)
    for (const Instruction &inst : bb)
      if (auto *call = dyn_cast<CallInst>(&inst))
        if (const Function *callee = call->getCalledFunction()) {
          StringRef name = callee->getName();
          if (name.contains("barrier") || name.contains("work_group_")) return true;
        }
  return false;
}

}  // namespace clproj

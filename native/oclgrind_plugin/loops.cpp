// Loop analysis for bounded emulation (docs/miniemu.md, "Bounded emulation").
//
// For every loop of the kernel function (LLVM LoopInfo, preorder) we report the
// backedge-taken count that ScalarEvolution derives, as a small JSON expression tree
// over constants and kernel arguments, so that the Python side can evaluate it with
// the launch's actual (or probe) argument values:
//   {"c":V,"bits":W}                   constant (V signed)
//   {"arg":I,"bits":W}                 kernel argument I
//   {"gid":D,"bits":W}                 get_global_id(D) of the work-item
//   {"op":O,"bits":W,"ops":[...]}      O in add, mul, udiv, umax, smax, umin, smin,
//                                      zext, sext, trunc
//   {"unknown":"..."}                  anything else (other builtins, loads, recurrences)
// "exact" is the exact count (null when SCEV cannot compute it), "max" the symbolic
// maximum (an upper bound, e.g. from `i < maxit` in a loop that also exits on data).
// The header's terminator executes once per iteration (backedge-taken count + 1 per
// loop entry): the plugin counts it at run time (loop_iterations).
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
      const Function *callee = call ? call->getCalledFunction() : nullptr;
      if (auto *a = dyn_cast<Argument>(v))
        o << "{\"arg\":" << a->getArgNo() << ",\"bits\":" << bits << "}";
      else if (callee && callee->getName().contains("get_global_id") && call->arg_size() == 1 &&
               isa<ConstantInt>(call->getArgOperand(0)))
        // A trip count that depends on the work-item (a triangular nest: `for (j2 = j1; ...)`
        // with j1 = get_global_id(0)): Python evaluates it over the launch's id range.
        o << "{\"gid\":" << cast<ConstantInt>(call->getArgOperand(0))->getZExtValue()
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
    int parent = loop->getParentLoop() ? ids[loop->getParentLoop()] : -1;
    o << (index ? "," : "") << "{\"id\":" << index << ",\"depth\":" << loop->getLoopDepth()
      << ",\"parent\":" << parent << ",\"blocks\":" << loop->getNumBlocks() << ",\"exact\":"
      << (isa<SCEVCouldNotCompute>(exact) ? std::string("null") : scevJson(exact))
      << ",\"max\":" << (isa<SCEVCouldNotCompute>(max) ? std::string("null") : scevJson(max))
      << "}";
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

// Instruction classification: LLVM opcode + type -> clproj instruction class.
// Rules (docs/miniemu.md): arithmetic counts once per vector lane; memory
// instructions count once per instruction (their bytes are counted separately);
// calls are classified by the (demangled) builtin name.
#include <cstring>
#include <string>

#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Type.h>

#include "stats_plugin.h"

namespace clproj {

#define CLPROJ_NAME(e, name) name,
const char *const kClassNames[NUM_CLASSES] = {CLPROJ_INST_CLASSES(CLPROJ_NAME)};
const char *const kSpecialNames[NUM_SPECIAL] = {CLPROJ_SPECIAL_FAMILIES(CLPROJ_NAME)};
#undef CLPROJ_NAME

namespace {

// Family of a special function (builtin name without native_/half_ prefix).
uint8_t specialFamily(std::string n) {
  n = n.substr(0, n.find('.'));  // LLVM intrinsics: "sqrt.f32" -> "sqrt"
  for (const char *prefix : {"native_", "half_", "fast_"})
    if (n.compare(0, std::strlen(prefix), prefix) == 0) n = n.substr(std::strlen(prefix));
  if (n == "sqrt" || n == "cbrt" || n == "length" || n == "distance" || n == "hypot") return SF_SQRT;
  if (n == "rsqrt" || n == "normalize") return SF_RSQRT;
  if (n.compare(0, 3, "exp") == 0 || n.compare(0, 3, "pow") == 0 || n == "rootn") return SF_EXP;
  if (n.compare(0, 3, "log") == 0) return SF_LOG;
  if (n.compare(0, 3, "sin") == 0 || n.compare(0, 3, "cos") == 0 || n.compare(0, 3, "tan") == 0)
    return SF_SIN;
  return SF_OTHER;
}

unsigned lanesOf(const llvm::Type *type) {
  if (auto *vt = llvm::dyn_cast<llvm::FixedVectorType>(type)) return vt->getNumElements();
  return 1;
}

bool isDouble(const llvm::Type *type) { return type->getScalarType()->isDoubleTy(); }

uint8_t fp(const llvm::Type *type, uint8_t fp32cls) {
  return isDouble(type) ? fp32cls + (FP64_ADD - FP32_ADD) : fp32cls;
}

uint8_t memoryClass(unsigned addrspace) {
  switch (addrspace) {
    case 1:
    case 2:
      return MEMORY_GLOBAL;  // constant memory is counted with global
    case 3:
      return MEMORY_LOCAL;
    default:
      return MEMORY_PRIVATE;
  }
}

// "_Z4sqrtf" -> "sqrt"; unmangled names are returned as they are.
std::string demangledName(const std::string &name) {
  if (name.size() < 3 || name[0] != '_' || name[1] != 'Z') return name;
  size_t i = 2;
  size_t len = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') len = len * 10 + (name[i++] - '0');
  if (len == 0 || i + len > name.size()) return name;
  return name.substr(i, len);
}

bool startsWith(const std::string &s, const char *prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

bool oneOf(const std::string &s, std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (s == n) return true;
  return false;
}

InstInfo classifyCall(const llvm::CallInst *call) {
  InstInfo info;
  const llvm::Function *callee = call->getCalledFunction();
  if (callee == nullptr) return info;  // indirect call: other
  std::string raw = callee->getName().str();
  llvm::Type *ret = call->getType();
  unsigned lanes = ret->isVoidTy() ? 1 : lanesOf(ret);
  info.lanes = lanes;
  if (startsWith(raw, "llvm.")) {
    std::string n = raw.substr(5);
    if (startsWith(n, "dbg.") || startsWith(n, "lifetime.") || startsWith(n, "invariant.") ||
        startsWith(n, "assume") || startsWith(n, "experimental.noalias")) {
      info.cls = IGNORED;
    } else if (startsWith(n, "fmuladd") || startsWith(n, "fma")) {
      info.cls = fp(ret, FP32_FMA);
    } else if (startsWith(n, "sqrt") || startsWith(n, "exp") || startsWith(n, "log") ||
               startsWith(n, "sin") || startsWith(n, "cos") || startsWith(n, "pow")) {
      info.cls = SPECIAL;
      info.special = specialFamily(n);
    } else if (startsWith(n, "fabs") || startsWith(n, "minnum") || startsWith(n, "maxnum") ||
               startsWith(n, "smin") || startsWith(n, "smax") || startsWith(n, "umin") ||
               startsWith(n, "umax") || startsWith(n, "abs") || startsWith(n, "copysign")) {
      info.cls = COMPARE_SELECT;
    } else if (startsWith(n, "floor") || startsWith(n, "ceil") || startsWith(n, "trunc") ||
               startsWith(n, "rint") || startsWith(n, "round") || startsWith(n, "nearbyint")) {
      info.cls = CONVERSION;
    } else {
      info.cls = OTHER;
    }
    return info;
  }
  std::string n = demangledName(raw);
  if (oneOf(n, {"barrier", "work_group_barrier"})) {
    info.cls = BARRIER;
    info.lanes = 1;
  } else if (startsWith(n, "atomic_") || startsWith(n, "atom_")) {
    info.cls = ATOMIC;
    info.lanes = 1;
  } else if (oneOf(n, {"fma", "mad"})) {
    info.cls = fp(ret, FP32_FMA);
  } else if (n == "dot") {
    llvm::Type *arg = call->getArgOperand(0)->getType();
    info.cls = fp(arg, FP32_FMA);
    info.lanes = lanesOf(arg);
  } else if (startsWith(n, "native_") || startsWith(n, "half_") ||
             oneOf(n, {"sqrt", "rsqrt", "cbrt", "exp", "exp2", "exp10", "expm1", "log", "log2",
                       "log10", "log1p", "logb", "sin", "cos", "tan", "asin", "acos", "atan",
                       "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sinpi",
                       "cospi", "tanpi", "asinpi", "acospi", "atanpi", "atan2pi", "pow", "pown",
                       "powr", "rootn", "sincos", "erf", "erfc", "tgamma", "lgamma", "hypot",
                       "length", "distance", "normalize", "fast_length", "fast_distance",
                       "fast_normalize", "cross", "fmod", "remainder", "remquo"})) {
    info.cls = SPECIAL;
    info.special = specialFamily(n);
  } else if (oneOf(n, {"fmin", "fmax", "min", "max", "clamp", "step", "smoothstep", "select",
                       "bitselect", "fabs", "abs", "abs_diff", "sign", "isnan", "isinf",
                       "isfinite", "isequal", "isnotequal", "isgreater", "isless", "any", "all",
                       "copysign", "fdim"})) {
    info.cls = COMPARE_SELECT;
  } else if (oneOf(n, {"mul24", "mad24", "mul_hi", "mad_hi", "mad_sat"})) {
    info.cls = INT_MUL;
  } else if (oneOf(n, {"add_sat", "sub_sat", "hadd", "rhadd", "rotate", "clz", "popcount",
                       "upsample"})) {
    info.cls = INT_ADD;
  } else if (startsWith(n, "convert_") || startsWith(n, "as_") ||
             oneOf(n, {"floor", "ceil", "round", "trunc", "rint", "fract", "modf", "frexp",
                       "ldexp", "ilogb", "nan"})) {
    info.cls = CONVERSION;
  } else if (startsWith(n, "vload") || startsWith(n, "vstore")) {
    // The pointer argument is the last one for vload, the last one for vstore as well.
    const llvm::Value *ptr = call->getArgOperand(call->arg_size() - 1);
    info.cls = ptr->getType()->isPointerTy() ? memoryClass(ptr->getType()->getPointerAddressSpace())
                                             : static_cast<uint8_t>(OTHER);
    info.lanes = 1;
  } else {
    info.cls = OTHER;  // get_global_id & co, printf, async copies, ...
  }
  return info;
}

}  // namespace

InstInfo classify(const llvm::Instruction *inst) {
  InstInfo info;
  const llvm::Type *type = inst->getType();
  unsigned lanes = type->isVoidTy() ? 1 : lanesOf(type);
  info.lanes = lanes;
  switch (inst->getOpcode()) {
    case llvm::Instruction::FAdd:
    case llvm::Instruction::FSub:
    case llvm::Instruction::FNeg:
      info.cls = fp(type, FP32_ADD);
      break;
    case llvm::Instruction::FMul:
      info.cls = fp(type, FP32_MUL);
      break;
    case llvm::Instruction::FDiv:
    case llvm::Instruction::FRem:
      info.cls = fp(type, FP32_DIV);
      break;
    case llvm::Instruction::Add:
    case llvm::Instruction::Sub:
    case llvm::Instruction::And:
    case llvm::Instruction::Or:
    case llvm::Instruction::Xor:
    case llvm::Instruction::Shl:
    case llvm::Instruction::LShr:
    case llvm::Instruction::AShr:
    case llvm::Instruction::GetElementPtr:  // address arithmetic becomes integer adds
      info.cls = INT_ADD;
      break;
    case llvm::Instruction::Mul:
      info.cls = INT_MUL;
      break;
    case llvm::Instruction::UDiv:
    case llvm::Instruction::SDiv:
    case llvm::Instruction::URem:
    case llvm::Instruction::SRem:
      info.cls = INT_DIV;
      break;
    case llvm::Instruction::Trunc:
    case llvm::Instruction::ZExt:
    case llvm::Instruction::SExt:
      // Integer width changes (index widening for 64-bit addresses) are one integer ALU
      // operation or none (x86 movsxd / a free zero-extension; NVIDIA folds them into
      // IMAD.WIDE): priced as int_add, not at the measured rate of the `conversion`
      // microbenchmark, which converts between float and integer.
      info.cls = INT_ADD;
      break;
    case llvm::Instruction::FPTrunc:
    case llvm::Instruction::FPExt:
    case llvm::Instruction::FPToUI:
    case llvm::Instruction::FPToSI:
    case llvm::Instruction::UIToFP:
    case llvm::Instruction::SIToFP:
      info.cls = CONVERSION;
      break;
    case llvm::Instruction::ICmp:
    case llvm::Instruction::FCmp:
    case llvm::Instruction::Select:
      info.cls = COMPARE_SELECT;
      break;
    case llvm::Instruction::Br: {
      auto *br = llvm::cast<llvm::BranchInst>(inst);
      info.cls = br->isConditional() ? BRANCH : OTHER;
      info.conditional = br->isConditional();
      break;
    }
    case llvm::Instruction::Switch:
      info.cls = BRANCH;
      info.conditional = true;
      break;
    case llvm::Instruction::Load:
      info.cls = memoryClass(llvm::cast<llvm::LoadInst>(inst)->getPointerAddressSpace());
      info.lanes = 1;
      break;
    case llvm::Instruction::Store:
      info.cls = memoryClass(llvm::cast<llvm::StoreInst>(inst)->getPointerAddressSpace());
      info.lanes = 1;
      break;
    case llvm::Instruction::AtomicRMW:
    case llvm::Instruction::AtomicCmpXchg:
      info.cls = ATOMIC;
      info.lanes = 1;
      break;
    case llvm::Instruction::Call:
      info = classifyCall(llvm::cast<llvm::CallInst>(inst));
      break;
    default:
      info.cls = OTHER;  // phi, alloca, bitcast, ret, extract/insert element, ...
      break;
  }
  if (info.lanes == 0) info.lanes = 1;
  return info;
}

}  // namespace clproj

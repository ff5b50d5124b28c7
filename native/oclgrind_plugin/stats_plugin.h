// StatsPlugin: device-independent kernel statistics collected while Oclgrind runs.
//
// Output (JSON lines appended to $CLPROJ_STATS_OUT, format "clproj.plugin-stats" v1,
// documented in docs/miniemu.md): one {"type":"group",...} object per emulated
// work-group, then one {"type":"kernel",...} object per kernel launch.
//
// Thread safety: Oclgrind may run work-groups on several worker threads. Everything
// touched while a group runs lives in a thread_local WorkerState; at workGroupComplete
// the group's statistics are finalised on that thread and merged into the kernel totals
// under m_mutex. Kernel-level state is reset in kernelBegin, so nothing leaks from one
// launch to the next.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <oclgrind/Plugin.h>

#include "stats_fields.h"  // generated from clproj/stats_table.py

namespace llvm {
class BasicBlock;
class Function;
class Instruction;
class Value;
}

namespace clproj {

// Instruction classes: clproj/stats_table.py (docs/formats.md section 2).
enum InstClass : uint8_t {
#define CLPROJ_ENUM(e, name) e,
  CLPROJ_INST_CLASSES(CLPROJ_ENUM)
#undef CLPROJ_ENUM
  NUM_CLASSES,
  IGNORED = 255,  // debug/lifetime intrinsics: not executed on a device
};
extern const char *const kClassNames[NUM_CLASSES];

constexpr int kNumWarps = 4;      // 8, 16, 32, 64
constexpr int kNumSegments = 3;   // 32, 64, 128 B
constexpr int kNumBankCounts = 2; // 16, 32 banks of 4 B
constexpr unsigned kWarps[kNumWarps] = {8, 16, 32, 64};
constexpr unsigned kSegments[kNumSegments] = {32, 64, 128};
constexpr unsigned kBanks[kNumBankCounts] = {16, 32};
// The same as shifts: every size above is a power of two, and the per-access loops that
// divide by them ran a 64-bit division each (half of finishGroup's time).
constexpr unsigned kWarpShift[kNumWarps] = {3, 4, 5, 6};
constexpr unsigned kSegmentShift[kNumSegments] = {5, 6, 7};
constexpr unsigned kBankShift[kNumBankCounts] = {4, 5};
static_assert(kWarps[0] == 1u << kWarpShift[0] && kWarps[1] == 1u << kWarpShift[1] &&
              kWarps[2] == 1u << kWarpShift[2] && kWarps[3] == 1u << kWarpShift[3]);
static_assert(kSegments[0] == 1u << kSegmentShift[0] && kSegments[1] == 1u << kSegmentShift[1] &&
              kSegments[2] == 1u << kSegmentShift[2]);
static_assert(kBanks[0] == 1u << kBankShift[0] && kBanks[1] == 1u << kBankShift[1]);
constexpr int kMaxLoops = 32;  // loops tracked per kernel (bounded emulation, loops.cpp)

// Special functions differ in cost by an order of magnitude (rsqrt vs sin on a CPU),
// so the SPECIAL class is also broken down by function family. The families match the
// device profiles' measured special-function throughputs.
enum SpecialFamily : uint8_t {
#define CLPROJ_ENUM(e, name) e,
  CLPROJ_SPECIAL_FAMILIES(CLPROJ_ENUM)
#undef CLPROJ_ENUM
  NUM_SPECIAL
};
extern const char *const kSpecialNames[NUM_SPECIAL];

struct InstInfo {
  uint8_t cls = OTHER;
  uint8_t lanes = 1;
  uint8_t special = SF_OTHER;  // family, when cls == SPECIAL
  bool conditional = false;  // conditional br or switch: divergence is tracked
  int8_t loop = -1;  // loop id when this is a loop header's terminator (loops.cpp)
  uint32_t id = 0;  // dense per-launch instruction id (dependence.cpp)
};

// Statistics of one work-group (or a sum of groups).
struct Stats {
  // The scalar counters (what each counts: clproj/stats_table.py, stats_fields.h).
#define CLPROJ_MEMBER(m) uint64_t m = 0;
  CLPROJ_STATS_SCALARS(CLPROJ_MEMBER)
#undef CLPROJ_MEMBER
  std::array<uint64_t, NUM_CLASSES> inst{};
  std::array<uint64_t, NUM_SPECIAL> special{};
  uint64_t trans[2][kNumWarps][kNumSegments] = {};  // [load/store][warp][segment]
  uint64_t bank_req[kNumBankCounts] = {}, bank_wave[kNumBankCounts] = {};
  uint64_t br_warp[kNumWarps] = {}, br_div[kNumWarps] = {};
  // dep_cold per segment size (32/64/128 B): dependent rounds that streamed in a new
  // segment of it.
  uint64_t dep_cold[kNumSegments] = {};
  // Per-work-item transactions: accesses touching another segment than the previous
  // access of the same instruction by the same work-item ([load/store][segment]).
  uint64_t item_tx[2][kNumSegments] = {};
  void add(const Stats &o);
  std::string json() const;
};

// One work-item memory access (global/constant or local), kept until group end.
// Access and BranchRec name their instruction by its *slot*: a dense per-launch number
// of the instructions that leave such records (StatsPlugin::slotOf), so that finishGroup counts
// dynamic instances in flat arrays and sorts on one packed integer key (KeyLayout).
struct Access {
  uint32_t slot;      // the instruction (StatsPlugin::slotOf)
  uint32_t instance;  // how many times this work-item executed it before
  uint32_t lid;       // linear local id
  uint32_t size;
  uint64_t addr;
  uint64_t key = 0;  // (kind, slot, instance, lid) packed by finishGroup
  uint8_t kind;      // 0 global load, 1 global store, 2 local load, 3 local store
};

struct BranchRec {
  uint32_t slot;
  uint32_t instance;
  uint32_t lid;
  uint64_t taken;
  uint64_t key = 0;  // (slot, instance, lid) packed by finishGroup
};

// Pointer -> value map with a direct-mapped cache in front: the plugin looks an
// instruction up at every executed instruction and memory access (a kernel has a few
// hundred; the hash map alone was 4-5% of an emulation). Values live in the map's nodes,
// so the references handed out stay valid as it grows.
template <typename T>
class PointerMap {
 public:
  T *find(const void *key) {
    Entry &e = cache_[(reinterpret_cast<uintptr_t>(key) >> 4) & (kWays - 1)];
    if (e.key == key && e.value != nullptr) return e.value;
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    e = {key, &it->second};
    return &it->second;
  }
  T &insert(const void *key, const T &value) { return map_.emplace(key, value).first->second; }
  size_t size() const { return map_.size(); }
  void clear() {
    map_.clear();
    cache_.fill(Entry{});
  }

 private:
  struct Entry {
    const void *key = nullptr;
    T *value = nullptr;
  };
  static constexpr size_t kWays = 1024;
  std::unordered_map<const void *, T> map_;
  std::array<Entry, kWays> cache_{};
};

// Dependence chains (dependence.cpp): what one value of one work-item waits for.
struct Dep {
  uint32_t mem = 0;   // global round trips on its longest dependence path
  // rounds on it that streamed in a new segment, per segment size (32, 64, 128 B): a
  // memory system that fetches 64 B per access serves a walk's second sector from L2
  uint32_t cold[kNumSegments] = {};
  uint32_t raw = 0;   // steps that read back a word the work-item stored
  uint32_t ptr = 0;   // steps whose address came from a loaded value
  uint32_t fp = 0;    // floating-point operations on its longest data-dependence path
  uint32_t fma = 0;   // of those, fused multiply-adds (a longer latency than an add)
  uint32_t reload = 0;  // loads on that path that read a stored word after another store
  void merge(const Dep &o);  // element-wise max
};

// A word a work-item stored: the chain of its value and when (the lane's store clock).
struct StoredWord {
  Dep dep;
  uint64_t when = 0;
};

// Every store instruction of a work-item: later loads that may alias wait for its chain;
// `last` is the store clock of its latest store.
struct Fence {
  uint32_t id = 0;
  Dep dep;
  uint64_t last = 0;
};

struct LaneDeps {
  std::vector<Dep> val;            // by instruction id: the value's latest chain
  std::vector<uint64_t> last_end;  // by instruction id: one past the last byte accessed (0: none)
  std::unordered_map<uint64_t, StoredWord> stored;  // 4-byte word -> what was stored there last
  std::vector<Fence> fences;       // one per store instruction: the chain of its stores
  uint64_t stores = 0;             // global stores executed so far (a clock for `StoredWord`)
  Dep pending;                     // memory chain of the load being executed
  bool has_pending = false, pending_raw = false;
  bool pending_reload = false;  // the load reads a stored word another store came after
  uint8_t pending_cold = 0;  // segment sizes (bit per kSegments entry) the load newly touched
  uint8_t cold_since = 0;    // the same, for global loads since the last dependent round
  Dep longest;              // the work-item's longest chains
};

// The object a memory instruction's pointer is based on, for may-alias decisions.
struct MemObject {
  const llvm::Value *object = nullptr;  // llvm::getUnderlyingObject of the pointer
  bool noalias = false;                 // a `restrict` kernel argument
};

class DependenceTracker {
 public:
  static constexpr uint32_t kNoId = 0xffffffffu;
  void reset();                   // new launch: instruction ids are reassigned
  void groupBegin(size_t lanes);  // new work-group
  uint32_t assign(const llvm::Instruction *inst);  // id of inst, operand ids recorded
  void load(uint32_t lid, uint32_t id, uint64_t addr, size_t size);  // global load (before executed)
  void store(uint32_t lid, const llvm::Instruction *inst, uint32_t id, uint64_t addr, size_t size,
             const llvm::BasicBlock *previous);
  void executed(uint32_t lid, const llvm::Instruction *inst, uint32_t id,
                const llvm::BasicBlock *previous, bool fp_op, bool fma_op);
  void finish(Stats &s) const;  // the group's sums into s

 private:
  uint32_t idOf(const llvm::Value *v);
  bool mayAlias(uint32_t a, uint32_t b) const;  // memory instructions a and b (by id)
  LaneDeps &lane(uint32_t lid);
  Dep operandDep(LaneDeps &l, const llvm::Instruction *inst, uint32_t id,
                 const llvm::BasicBlock *previous) const;
  void countSegments(LaneDeps &l, uint32_t id, uint64_t addr, size_t size, int store,
                     uint8_t &cold);
  std::unordered_map<const llvm::Value *, uint32_t> ids_;
  std::vector<std::vector<uint32_t>> operands_;  // by id: operand ids (kNoId: not an instruction)
  std::vector<MemObject> objects_;               // by id: what a memory instruction accesses
  std::vector<LaneDeps> lanes_;
  uint64_t raw_loads_ = 0, pointer_loads_ = 0;
  uint64_t item_tx_[2][kNumSegments] = {};
};

struct WorkerState {
  uint64_t generation = 0;
  PointerMap<InstInfo> cache;  // by instruction
  PointerMap<uint32_t> slots;  // by instruction (nullptr too): its Access/BranchRec slot
  size_t gsx = 1, gsy = 1;
  size_t lanes = 0;
  std::vector<Access> accesses;
  std::vector<BranchRec> branches;
  std::unordered_map<uint64_t, uint64_t> atomic_hits[2];  // [global, local] address -> count
  Stats stats;
  // Bounded emulation: header-terminator executions per loop, work-items completed in
  // this group, instructions since the last budget check.
  std::array<uint64_t, kMaxLoops> loop_iters{};
  uint64_t completed = 0;
  uint64_t since_check = 0;
  DependenceTracker deps;
  const oclgrind::WorkItem *lane_item = nullptr;  // last work-item seen, and its linear id
  uint32_t lane_id = 0;
};

class StatsPlugin : public oclgrind::Plugin {
 public:
  explicit StatsPlugin(const oclgrind::Context *context);
  bool isThreadSafe() const override { return true; }

  void instructionExecuted(const oclgrind::WorkItem *workItem, const llvm::Instruction *instruction,
                           const oclgrind::TypedValue &result) override;
  void memoryLoad(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                  size_t address, size_t size) override;
  void memoryStore(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                   size_t address, size_t size, const uint8_t *storeData) override;
  void memoryAtomicStore(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                         oclgrind::AtomicOp op, size_t address, size_t size) override;
  void kernelBegin(const oclgrind::KernelInvocation *kernelInvocation) override;
  void kernelEnd(const oclgrind::KernelInvocation *kernelInvocation) override;
  void workGroupBegin(const oclgrind::WorkGroup *workGroup) override;
  void workGroupComplete(const oclgrind::WorkGroup *workGroup) override;
  void workItemComplete(const oclgrind::WorkItem *workItem) override;

 private:
  void readSettings();  // CLPROJ_STATS_*, at each launch
  WorkerState &state();
  const InstInfo &infoFor(WorkerState &st, const llvm::Instruction *instruction);
  static uint32_t slotOf(WorkerState &st, const llvm::Instruction *instruction);
  uint32_t laneOf(WorkerState &st, const oclgrind::WorkItem *workItem);
  void recordAccess(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                    size_t address, size_t size, bool store);
  void flush(bool stopped_early);  // caller holds m_mutex
  // Finalise the running group (all of it, or the first `work_items` when stopping early).
  std::string finishGroup(const oclgrind::WorkGroup *group, WorkerState &st, uint64_t work_items);
  [[noreturn]] void stopEarly(const oclgrind::WorkGroup *group, WorkerState &st,
                              uint64_t work_items, const char *reason);

  std::string output_path_;
  uint64_t stop_after_groups_ = 0;  // 0: never; else _Exit after writing N groups
  std::atomic<uint64_t> generation_{0};

  std::mutex m_mutex;  // guards everything below
  const oclgrind::KernelInvocation *invocation_ = nullptr;
  std::string kernel_name_;
  std::string launch_json_;
  Stats sum_;
  uint64_t groups_ = 0;
  uint64_t local_bytes_ = 0;
  std::string group_lines_;
  std::string private_json_;
  // Bounded emulation (env CLPROJ_STATS_MAX_WORK_ITEMS / _MAX_INSTRUCTIONS / _BUDGET_S).
  uint64_t max_work_items_ = 0;
  uint64_t max_instructions_ = 0;
  double budget_s_ = 0;
  std::atomic<uint64_t> instructions_{0};
  double start_s_ = 0;
  bool has_barrier_ = true;
  std::unordered_map<const llvm::Instruction *, int> loop_headers_;
  std::string loops_json_ = "[]";
  std::string stop_reason_;
  std::array<uint64_t, kMaxLoops> loop_sum_{};
};

// Static estimate of private state per work-item (liveness.cpp).
struct PrivateEstimate {
  uint64_t alloca_bytes = 0;
  uint64_t max_live_bytes = 0;
  uint64_t max_live_values = 0;
  uint64_t ssa_values = 0;
};
PrivateEstimate estimatePrivate(const llvm::Function *function);

// Loop analysis (loops.cpp): JSON list of loops with SCEV trip counts; fills the map
// header terminator -> loop id. hasBarrier: the kernel calls a barrier/collective.
std::string analyzeLoops(const llvm::Function *function,
                         std::unordered_map<const llvm::Instruction *, int> &headers);
bool hasBarrier(const llvm::Function *function);

// Instruction classification (classify.cpp).
InstInfo classify(const llvm::Instruction *instruction);

}  // namespace clproj

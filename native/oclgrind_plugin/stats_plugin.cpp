#include "stats_plugin.h"
#include "store_ranges.h"
#include "../clproj_settings.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>

#include <oclgrind/Kernel.h>
#include <oclgrind/KernelInvocation.h>
#include <oclgrind/Memory.h>
#include <oclgrind/WorkGroup.h>
#include <oclgrind/WorkItem.h>

namespace clproj {

namespace {

thread_local WorkerState t_state;

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string size3(const oclgrind::Size3 &s) {
  std::ostringstream o;
  o << "[" << s.x << "," << s.y << "," << s.z << "]";
  return o.str();
}

uint32_t linearLocalId(const oclgrind::WorkItem *wi, const WorkerState &st) {
  oclgrind::Size3 l = wi->getLocalID();
  return static_cast<uint32_t>(l.x + st.gsx * (l.y + st.gsy * l.z));
}

// Bits needed for values 0..max.
unsigned bitsFor(uint64_t max) {
  unsigned n = 0;
  while (n < 64 && (max >> n) != 0) ++n;
  return n;
}

// (kind, slot, instance, lid) packed into one integer whose order is the tuple's, when
// the group's values fit in 64 bits (they do unless a work-item runs one instruction
// billions of times): sorting on it is several times faster than comparing the fields.
struct KeyLayout {
  unsigned lid_bits = 0, instance_bits = 0, slot_bits = 0;
  bool fits = false;
  static KeyLayout of(uint32_t slots, uint32_t max_instance, size_t lanes, unsigned kind_bits) {
    KeyLayout k;
    k.lid_bits = bitsFor(lanes ? lanes - 1 : 0);
    k.instance_bits = bitsFor(max_instance);
    k.slot_bits = bitsFor(slots ? slots - 1 : 0);
    k.fits = kind_bits + k.slot_bits + k.instance_bits + k.lid_bits <= 64;
    return k;
  }
  uint64_t pack(uint64_t kind, uint64_t slot, uint64_t instance, uint64_t lid) const {
    uint64_t key = kind;
    key = slot_bits ? (key << slot_bits | slot) : key;
    key = instance_bits ? (key << instance_bits | instance) : key;
    return lid_bits ? (key << lid_bits | lid) : key;
  }
};

uint8_t kindOf(const Access &a) { return a.kind; }
uint8_t kindOf(const BranchRec &) { return 0; }

// Access or BranchRec records sorted by (kind, slot, instance, lid): on the packed key
// where the group's values fit it, else on the fields (the same order).
template <typename Rec>
void sortRuns(std::vector<Rec> &recs, uint32_t slots, size_t lanes, unsigned kind_bits) {
  uint32_t max_instance = 0;
  for (const Rec &r : recs) max_instance = std::max(max_instance, r.instance);
  const KeyLayout k = KeyLayout::of(slots, max_instance, lanes, kind_bits);
  if (k.fits) {
    for (Rec &r : recs) r.key = k.pack(kindOf(r), r.slot, r.instance, r.lid);
    std::sort(recs.begin(), recs.end(), [](const Rec &a, const Rec &b) { return a.key < b.key; });
    return;
  }
  std::sort(recs.begin(), recs.end(), [](const Rec &a, const Rec &b) {
    if (kindOf(a) != kindOf(b)) return kindOf(a) < kindOf(b);
    if (a.slot != b.slot) return a.slot < b.slot;
    if (a.instance != b.instance) return a.instance < b.instance;
    return a.lid < b.lid;
  });
}

// Distinct values in `v`: sorted first unless already in order (lanes of a coalesced
// access touch segments in increasing order: the common case needs no sort).
size_t distinctCount(std::vector<uint64_t> &v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  return static_cast<size_t>(std::unique(v.begin(), v.end()) - v.begin());
}

// Transactions for a run of accesses of one warp-level instruction instance.
// [begin, end) are sorted by lid; every access touches segments addr/S .. (addr+size-1)/S.
void countTransactions(const Access *begin, const Access *end, Stats &stats, int store,
                       std::vector<uint64_t> &scratch) {
  for (int w = 0; w < kNumWarps; ++w) {
    const Access *a = begin;
    while (a != end) {
      const unsigned ws = kWarpShift[w];
      uint32_t warp = a->lid >> ws;
      const Access *b = a;
      while (b != end && b->lid >> ws == warp) ++b;
      for (int s = 0; s < kNumSegments; ++s) {
        scratch.clear();
        for (const Access *x = a; x != b; ++x)
          for (uint64_t seg = x->addr >> kSegmentShift[s];
               seg <= (x->addr + x->size - 1) >> kSegmentShift[s]; ++seg)
            scratch.push_back(seg);
        stats.trans[store][w][s] += distinctCount(scratch);
      }
      a = b;
    }
  }
}

// Bank conflicts for a run of local accesses of one instruction instance.
// Degree of a warp-level request = max over banks of distinct 4-byte words in that bank.
void countBanks(const Access *begin, const Access *end, Stats &stats,
                std::vector<uint64_t> &scratch) {
  for (int k = 0; k < kNumBankCounts; ++k) {
    const unsigned banks = kBanks[k], bs = kBankShift[k];
    const Access *a = begin;
    while (a != end) {
      uint32_t warp = a->lid >> bs;
      const Access *b = a;
      while (b != end && b->lid >> bs == warp) ++b;
      scratch.clear();
      for (const Access *x = a; x != b; ++x)
        for (uint64_t word = x->addr / 4; word <= (x->addr + x->size - 1) / 4; ++word)
          scratch.push_back(word);
      scratch.resize(distinctCount(scratch));
      unsigned perBank[32] = {};
      unsigned degree = 1;
      for (uint64_t word : scratch) degree = std::max(degree, ++perBank[word & (banks - 1)]);
      stats.bank_req[k] += 1;
      stats.bank_wave[k] += degree;
      a = b;
    }
  }
}

}  // namespace

void Stats::add(const Stats &o) {
#define CLPROJ_ADD(m) m += o.m;
  CLPROJ_STATS_SCALARS(CLPROJ_ADD)
#undef CLPROJ_ADD
  for (int i = 0; i < NUM_CLASSES; ++i) inst[i] += o.inst[i];
  for (int i = 0; i < NUM_SPECIAL; ++i) special[i] += o.special[i];
  for (int d = 0; d < 2; ++d)
    for (int w = 0; w < kNumWarps; ++w)
      for (int s = 0; s < kNumSegments; ++s) trans[d][w][s] += o.trans[d][w][s];
  for (int k = 0; k < kNumBankCounts; ++k) {
    bank_req[k] += o.bank_req[k];
    bank_wave[k] += o.bank_wave[k];
  }
  for (int w = 0; w < kNumWarps; ++w) {
    br_warp[w] += o.br_warp[w];
    br_div[w] += o.br_div[w];
  }
  for (int k = 0; k < kNumSegments; ++k) dep_cold[k] += o.dep_cold[k];
  for (int d = 0; d < 2; ++d)
    for (int k = 0; k < kNumSegments; ++k) item_tx[d][k] += o.item_tx[d][k];
}

// The JSON of docs/miniemu.md: each object's scalars from the table (stats_fields.h),
// then its arrays. ``sep`` puts the commas between fields.
std::string Stats::json() const {
  std::ostringstream o;
  const char *sep = "";
#define CLPROJ_FIELD(m, key) \
  o << sep << '"' << key << "\":" << m; \
  sep = ",";
  o << "{";
  CLPROJ_STATS_TOP(CLPROJ_FIELD)
  o << ",\"instructions\":{";
  for (int i = 0; i < NUM_CLASSES; ++i) o << (i ? "," : "") << '"' << kClassNames[i] << "\":" << inst[i];
  o << "},\"special_functions\":{";
  for (int i = 0; i < NUM_SPECIAL; ++i) o << (i ? "," : "") << '"' << kSpecialNames[i] << "\":" << special[i];
  o << "},\"global\":{";
  sep = "";
  CLPROJ_STATS_GLOBAL(CLPROJ_FIELD)
  o << ",\"transactions\":{";
  for (int d = 0; d < 2; ++d) {
    o << (d ? "," : "") << (d ? "\"store\":{" : "\"load\":{");
    for (int w = 0; w < kNumWarps; ++w) {
      o << (w ? "," : "") << '"' << kWarps[w] << "\":{";
      for (int s = 0; s < kNumSegments; ++s)
        o << (s ? "," : "") << '"' << kSegments[s] << "\":" << trans[d][w][s];
      o << "}";
    }
    o << "}";
  }
  o << "},\"item_transactions\":{";
  for (int d = 0; d < 2; ++d) {
    o << (d ? ",\"store\":{" : "\"load\":{");
    for (int k = 0; k < kNumSegments; ++k)
      o << (k ? "," : "") << '"' << kSegments[k] << "\":" << item_tx[d][k];
    o << "}";
  }
  o << "}},\"local\":{";
  sep = "";
  CLPROJ_STATS_LOCAL(CLPROJ_FIELD)
  o << ",\"bank\":{";
  for (int k = 0; k < kNumBankCounts; ++k)
    o << (k ? "," : "") << '"' << kBanks[k] << "\":{\"requests\":" << bank_req[k]
      << ",\"wavefronts\":" << bank_wave[k] << "}";
  o << "}},\"branches\":{";
  sep = "";
  CLPROJ_STATS_BRANCHES(CLPROJ_FIELD)
  o << ",\"warp_level\":{";
  for (int w = 0; w < kNumWarps; ++w) o << (w ? "," : "") << '"' << kWarps[w] << "\":" << br_warp[w];
  o << "},\"divergent\":{";
  for (int w = 0; w < kNumWarps; ++w) o << (w ? "," : "") << '"' << kWarps[w] << "\":" << br_div[w];
  o << "}},\"atomics\":{";
  sep = "";
  CLPROJ_STATS_ATOMICS(CLPROJ_FIELD)
  o << "},\"dependence\":{";
  sep = "";
  CLPROJ_STATS_DEPENDENCE(CLPROJ_FIELD)
  o << ",\"cold_chain\":" << dep_cold[0] << ",\"cold_chain_by_segment\":{";
  for (int k = 0; k < kNumSegments; ++k)
    o << (k ? "," : "") << '"' << kSegments[k] << "\":" << dep_cold[k];
  o << "}}}";
#undef CLPROJ_FIELD
  return o.str();
}

StatsPlugin::StatsPlugin(const oclgrind::Context *context) : oclgrind::Plugin(context) {}

// Read at each launch, not when the context is made: the emulator's fork server prepares
// a launch once (context, program, buffers) and forks each run from it, each with its own
// output file and budgets in its environment (miniemu/fork_server.py, "templates").
void StatsPlugin::readSettings() {
  output_path_ = clproj_setting_stats_out();
  stop_after_groups_ = static_cast<uint64_t>(clproj_setting_stats_stop_after_groups());
  max_work_items_ = static_cast<uint64_t>(clproj_setting_stats_max_work_items());
  max_instructions_ = static_cast<uint64_t>(clproj_setting_stats_max_instructions());
  budget_s_ = clproj_setting_stats_budget_s();
}

WorkerState &StatsPlugin::state() { return t_state; }

const InstInfo &StatsPlugin::infoFor(WorkerState &st, const llvm::Instruction *instruction) {
  if (const InstInfo *known = st.cache.find(instruction)) return *known;
  InstInfo fresh = classify(instruction);
  auto header = loop_headers_.find(instruction);  // read-only while groups run
  if (header != loop_headers_.end()) fresh.loop = static_cast<int8_t>(header->second);
  fresh.id = st.deps.assign(instruction);
  return st.cache.insert(instruction, fresh);
}

uint32_t StatsPlugin::slotOf(WorkerState &st, const llvm::Instruction *instruction) {
  if (const uint32_t *slot = st.slots.find(instruction)) return *slot;
  return st.slots.insert(instruction, static_cast<uint32_t>(st.slots.size()));
}

uint32_t StatsPlugin::laneOf(WorkerState &st, const oclgrind::WorkItem *workItem) {
  // Work-items run one at a time between barriers: remember the last one's linear id.
  if (workItem != st.lane_item) {
    st.lane_item = workItem;
    st.lane_id = linearLocalId(workItem, st);
  }
  return st.lane_id;
}

void StatsPlugin::instructionExecuted(const oclgrind::WorkItem *workItem,
                                      const llvm::Instruction *instruction,
                                      const oclgrind::TypedValue &result) {
  WorkerState &st = state();
  const InstInfo &info = infoFor(st, instruction);
  if (info.loop >= 0) st.loop_iters[info.loop]++;
  if (++st.since_check >= 4096 && (max_instructions_ || budget_s_ > 0)) {
    // Budget check (bounded modes run one worker thread): stop with partial statistics.
    // The instruction budget is the bound: it stops at the same instruction on any
    // machine. The wall-clock budget is only a backstop for a run that would otherwise
    // hang; where it fires, the statistics depend on the machine's speed and load.
    uint64_t total = instructions_.fetch_add(st.since_check) + st.since_check;
    st.since_check = 0;
    const char *why = nullptr;
    if (max_instructions_ && total >= max_instructions_) why = "instruction-budget";
    else if (budget_s_ > 0 && nowSeconds() - start_s_ > budget_s_) why = "time-budget";
    if (why != nullptr)
      // With barriers all lanes advance together between barriers: count them all;
      // without, work-items run one by one: the completed ones plus the partial one.
      stopEarly(workItem->getWorkGroup(), st, has_barrier_ ? st.lanes : st.completed + 1, why);
  }
  if (info.cls == IGNORED) return;
  st.deps.executed(laneOf(st, workItem), instruction, info.id, workItem->getPreviousBlock(),
                   info.cls <= FP64_DIV, info.cls == FP32_FMA || info.cls == FP64_FMA);
  st.stats.inst[info.cls] += info.lanes;
  if (info.cls == SPECIAL) st.stats.special[info.special] += info.lanes;
  if (info.cls == BARRIER) st.stats.barriers++;
  if (info.conditional) {
    st.stats.br_total++;
    const llvm::Value *cond = nullptr;
    if (auto *br = llvm::dyn_cast<llvm::BranchInst>(instruction))
      cond = br->getCondition();
    else if (auto *sw = llvm::dyn_cast<llvm::SwitchInst>(instruction))
      cond = sw->getCondition();
    uint64_t taken = cond ? workItem->getOperand(cond).getUInt() : 0;
    st.branches.push_back({slotOf(st, instruction), 0, linearLocalId(workItem, st), taken});
  }
}

void StatsPlugin::recordAccess(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                               size_t address, size_t size, bool store) {
  if (workItem == nullptr || size == 0) return;
  unsigned space = memory->getAddressSpace();
  if (space == oclgrind::AddrSpacePrivate) return;
  WorkerState &st = state();
  const bool local = space == oclgrind::AddrSpaceLocal;
  Stats &s = st.stats;
  if (local) {
    (store ? s.lstore_bytes : s.lload_bytes) += size;
    s.lacc++;
  } else {
    (store ? s.gstore_bytes : s.gload_bytes) += size;
    (store ? s.gstore_acc : s.gload_acc)++;
    storeRangesAccess(memory, address, size, store ? 1 : 0);
    const llvm::Instruction *inst = workItem->getCurrentInstruction();
    if (inst != nullptr) {
      uint32_t id = infoFor(st, inst).id;
      if (store)
        st.deps.store(laneOf(st, workItem), inst, id, address, size, workItem->getPreviousBlock());
      else
        st.deps.load(laneOf(st, workItem), id, address, size);
    }
  }
  // The dynamic instance is assigned at group end from the per-lane callback order.
  Access rec{};
  rec.slot = slotOf(st, workItem->getCurrentInstruction());
  rec.lid = linearLocalId(workItem, st);
  rec.size = static_cast<uint32_t>(size);
  rec.addr = address;
  rec.kind = static_cast<uint8_t>((local ? 2 : 0) + (store ? 1 : 0));
  st.accesses.push_back(rec);
}

void StatsPlugin::memoryLoad(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                             size_t address, size_t size) {
  recordAccess(memory, workItem, address, size, false);
}

void StatsPlugin::memoryStore(const oclgrind::Memory *memory, const oclgrind::WorkItem *workItem,
                              size_t address, size_t size, const uint8_t *) {
  recordAccess(memory, workItem, address, size, true);
}

void StatsPlugin::memoryAtomicStore(const oclgrind::Memory *memory,
                                    const oclgrind::WorkItem *workItem, oclgrind::AtomicOp,
                                    size_t address, size_t size) {
  // Every atomic operation notifies one atomic store (read-modify-writes notify a load too).
  if (workItem == nullptr) return;
  unsigned space = memory->getAddressSpace();
  WorkerState &st = state();
  if (space == oclgrind::AddrSpaceLocal) {
    st.stats.atom_local++;
    st.atomic_hits[1][address / 4]++;  // local: one bank word
  } else if (space != oclgrind::AddrSpacePrivate) {
    st.stats.atom_global++;
    st.atomic_hits[0][address / 64]++;  // global: a 64-byte line, the coherence unit
    storeRangesAccess(memory, address, size, 2);
  }
}

void StatsPlugin::kernelBegin(const oclgrind::KernelInvocation *inv) {
  std::lock_guard<std::mutex> lock(m_mutex);
  readSettings();
  generation_.fetch_add(1);
  invocation_ = inv;
  sum_ = Stats();
  groups_ = 0;
  group_lines_.clear();
  const oclgrind::Kernel *kernel = inv->getKernel();
  kernel_name_ = kernel->getName();
  local_bytes_ = kernel->getLocalMemorySize();
  std::ostringstream o;
  o << "\"kernel\":" << jsonString(kernel_name_) << ",\"work_dim\":" << inv->getWorkDim()
    << ",\"global_size\":" << size3(inv->getGlobalSize())
    << ",\"local_size\":" << size3(inv->getLocalSize())
    << ",\"global_offset\":" << size3(inv->getGlobalOffset())
    << ",\"num_groups\":" << size3(inv->getNumGroups());
  launch_json_ = o.str();
  PrivateEstimate est = estimatePrivate(kernel->getFunction());
  std::ostringstream p;
  p << "\"private\":{\"alloca_bytes\":" << est.alloca_bytes
    << ",\"max_live_bytes\":" << est.max_live_bytes
    << ",\"max_live_values\":" << est.max_live_values << ",\"ssa_values\":" << est.ssa_values
    << ",\"bytes_per_work_item\":" << est.alloca_bytes + est.max_live_bytes << "}";
  private_json_ = p.str();
  loops_json_ = analyzeLoops(kernel->getFunction(), loop_headers_);
  has_barrier_ = hasBarrier(kernel->getFunction());
  loop_sum_.fill(0);
  instructions_ = 0;
  stop_reason_.clear();
  start_s_ = nowSeconds();
  storeRangesKernelBegin(m_context, inv);
}

void StatsPlugin::workGroupBegin(const oclgrind::WorkGroup *group) {
  WorkerState &st = state();
  uint64_t gen = generation_.load();
  if (st.generation != gen) {  // new launch: instruction pointers may have been reused
    st.cache.clear();
    st.slots.clear();
    st.deps.reset();
    st.generation = gen;
    st.since_check = 0;  // the budget counts this launch's instructions from zero
  }
  oclgrind::Size3 gs = group->getGroupSize();
  st.gsx = gs.x;
  st.gsy = gs.y;
  size_t n = gs.x * gs.y * gs.z;
  st.lanes = n;
  st.accesses.clear();
  st.branches.clear();
  st.stats = Stats();
  st.stats.work_items = n;
  st.loop_iters.fill(0);
  st.completed = 0;
  st.lane_item = nullptr;  // work-item objects are reused from group to group
  st.deps.groupBegin(n);
  storeRangesGroupBegin();
}

void StatsPlugin::workItemComplete(const oclgrind::WorkItem *workItem) {
  WorkerState &st = state();
  st.completed++;
  // Work-item sampling: without barriers work-items run one after another, so after the
  // first max_work_items_ (whole warps of consecutive lids) the group's sample is complete.
  if (max_work_items_ != 0 && !has_barrier_ && st.completed >= max_work_items_ &&
      st.completed < st.lanes)
    stopEarly(workItem->getWorkGroup(), st, st.completed, "sampled-work-items");
}

void StatsPlugin::stopEarly(const oclgrind::WorkGroup *group, WorkerState &st,
                            uint64_t work_items, const char *reason) {
  std::string line = finishGroup(group, st, work_items);
  std::lock_guard<std::mutex> lock(m_mutex);
  group_lines_ += line;
  groups_++;
  stop_reason_ = reason;
  flush(true);
  std::fflush(nullptr);
  std::_Exit(0);
}

void StatsPlugin::workGroupComplete(const oclgrind::WorkGroup *group) {
  WorkerState &st = state();
  std::string line = finishGroup(group, st, st.lanes);
  std::lock_guard<std::mutex> lock(m_mutex);
  groups_++;
  group_lines_ += line;
  if (stop_after_groups_ != 0 && groups_ >= stop_after_groups_) {
    flush(true);
    std::fflush(nullptr);
    std::_Exit(0);  // single mode: the rest of the launch is not needed
  }
}

std::string StatsPlugin::finishGroup(const oclgrind::WorkGroup *group, WorkerState &st,
                                     uint64_t work_items) {
  Stats &s = st.stats;
  s.work_items = work_items;
  st.deps.finish(s);
  std::vector<uint64_t> scratch;

  // Memory: group accesses by (kind, instruction, per-lane dynamic instance), then by lid.
  // Work-items run one after another (up to each barrier), so each lane's records are in
  // its own execution order: the n-th record of (lane, instruction) is dynamic instance n.
  {
    std::vector<uint32_t> next(st.slots.size() * st.lanes);
    for (Access &a : st.accesses) a.instance = next[static_cast<size_t>(a.slot) * st.lanes + a.lid]++;
    std::fill(next.begin(), next.end(), 0);
    for (BranchRec &b : st.branches)
      b.instance = next[static_cast<size_t>(b.slot) * st.lanes + b.lid]++;
  }
  for (int space = 0; space < 2; ++space) {  // hottest atomic address of the group
    uint64_t hot = 0;
    for (const auto &kv : st.atomic_hits[space]) hot = std::max(hot, kv.second);
    (space ? s.atom_local_hot : s.atom_global_hot) = hot;
    st.atomic_hits[space].clear();
  }
  {  // The group's global footprint at 32-byte sector granularity: all of it, the
    // sectors it reads (what DRAM must deliver) and those it writes (each goes back to
    // memory once, whether or not it was read). One sort of (sector, direction) pairs.
    scratch.clear();
    for (const Access &a : st.accesses)
      if (a.kind < 2)
        for (uint64_t sec = a.addr / 32; sec <= (a.addr + a.size - 1) / 32; ++sec)
          scratch.push_back(sec << 1 | a.kind);
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
    uint64_t sectors = 0, by_kind[2] = {0, 0};
    for (size_t i = 0; i < scratch.size(); ++i) {
      by_kind[scratch[i] & 1]++;
      if (i == 0 || scratch[i] >> 1 != scratch[i - 1] >> 1) sectors++;
    }
    s.gunique_bytes = 32 * sectors;
    s.gunique_load_bytes = 32 * by_kind[0];
    s.gunique_store_bytes = 32 * by_kind[1];
    scratch.clear();
  }
  // Runs of one (kind, instruction, dynamic instance), each in lid order. Which order the
  // runs come in does not matter: each adds to sums.
  const auto slots = static_cast<uint32_t>(st.slots.size());
  sortRuns(st.accesses, slots, st.lanes, 2);
  for (size_t i = 0; i < st.accesses.size();) {
    size_t j = i;
    const Access &a = st.accesses[i];
    while (j < st.accesses.size() && st.accesses[j].kind == a.kind && st.accesses[j].slot == a.slot &&
           st.accesses[j].instance == a.instance)
      ++j;
    if (a.kind < 2)
      countTransactions(&st.accesses[i], &st.accesses[0] + j, s, a.kind, scratch);
    else
      countBanks(&st.accesses[i], &st.accesses[0] + j, s, scratch);
    i = j;
  }

  // Branches: a warp-level branch instance diverges when its lanes disagree.
  sortRuns(st.branches, slots, st.lanes, 0);
  for (size_t i = 0; i < st.branches.size();) {
    size_t j = i;
    while (j < st.branches.size() && st.branches[j].slot == st.branches[i].slot &&
           st.branches[j].instance == st.branches[i].instance)
      ++j;
    for (int w = 0; w < kNumWarps; ++w) {
      size_t a = i;
      while (a < j) {
        const unsigned ws = kWarpShift[w];
        uint32_t warp = st.branches[a].lid >> ws;
        size_t b = a;
        bool divergent = false;
        while (b < j && st.branches[b].lid >> ws == warp) {
          if (st.branches[b].taken != st.branches[a].taken) divergent = true;
          ++b;
        }
        s.br_warp[w]++;
        if (divergent) s.br_div[w]++;
        a = b;
      }
    }
    i = j;
  }

  uint64_t local_alloc = group->getLocalMemory() ? group->getLocalMemory()->getTotalAllocated() : 0;
  std::ostringstream line;
  line << "{\"type\":\"group\",\"kernel\":" << jsonString(kernel_name_)
       << ",\"group_id\":" << size3(group->getGroupID()) << ",\"group_index\":" << group->getGroupIndex()
       << ",\"group_size\":" << size3(group->getGroupSize()) << ",\"loop_iterations\":{";
  for (int i = 0, n = 0; i < kMaxLoops; ++i)
    if (st.loop_iters[i]) line << (n++ ? "," : "") << '"' << i << "\":" << st.loop_iters[i];
  line << "},\"stats\":" << s.json() << storeRangesGroupJson() << "}\n";

  instructions_.fetch_add(st.since_check);  // exact count for the kernel line
  st.since_check = 0;
  std::lock_guard<std::mutex> lock(m_mutex);
  sum_.add(s);
  for (int i = 0; i < kMaxLoops; ++i) loop_sum_[i] += st.loop_iters[i];
  local_bytes_ = std::max<uint64_t>(local_bytes_, local_alloc);
  st.accesses.clear();
  st.accesses.shrink_to_fit();
  st.branches.clear();
  st.branches.shrink_to_fit();
  return line.str();
}

void StatsPlugin::flush(bool stopped_early) {
  if (output_path_.empty()) return;
  FILE *f = std::fopen(output_path_.c_str(), "a");
  if (f == nullptr) return;
  std::fputs(group_lines_.c_str(), f);
  std::fprintf(f,
               "{\"type\":\"kernel\",\"format\":\"clproj.plugin-stats\",\"version\":1,%s,"
               "\"groups_emulated\":%llu,\"stopped_early\":%s,\"local_bytes_per_group\":%llu,%s,"
               "\"has_barrier\":%s,\"stop_reason\":\"%s\",\"instructions_executed\":%llu,"
               "\"loops\":%s,\"sum\":%s}\n",
               launch_json_.c_str(), static_cast<unsigned long long>(groups_),
               stopped_early ? "true" : "false", static_cast<unsigned long long>(local_bytes_),
               private_json_.c_str(), has_barrier_ ? "true" : "false", stop_reason_.c_str(),
               static_cast<unsigned long long>(instructions_.load()), loops_json_.c_str(),
               sum_.json().c_str());
  std::fclose(f);
  group_lines_.clear();
}

void StatsPlugin::kernelEnd(const oclgrind::KernelInvocation *) {
  std::lock_guard<std::mutex> lock(m_mutex);
  flush(false);
  invocation_ = nullptr;
}

}  // namespace clproj

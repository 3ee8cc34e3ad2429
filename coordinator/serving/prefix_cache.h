// The index of automatic prefix caching (vLLM's, SOSP'23 §4.4 and its v1 "hash chain"
// design): full KV blocks are registered under a hash of their parent chain and their
// `block_size` token ids, so a new sequence whose first k full blocks hold the same tokens
// after the same prefix can reuse those blocks' KV instead of computing it.
//
// Exact, not probabilistic: the 64-bit chain hash only finds a candidate; a hit also
// compares the block's tokens and its parent *link* (the parent's block id and the
// generation of that registration), so by induction from the root a matched chain holds
// exactly the tokens asked for, and a hash collision costs at most a miss.
//
// It also keeps the "cached free" blocks: registered blocks no sequence holds, in least
// recently used order. They stay matchable until `EvictLru` takes one for a new
// allocation. Reference counts live in BlockAllocator, the only user of this class.
//
// A host tier (`n_host_slots` > 0, scheduler.host_kv_cache_mb; SGLang's HiCache and
// Dynamo's KV block manager do the same): an evicted block's KV is not dropped but
// copied to a slot of a host-memory pool on every worker, where it stays matchable by the
// same chain; a hit there copies it back into a device block (`Onload`). A registration
// lives in one tier at a time, and the host tier has its own LRU: a block leaves the
// device's LRU into the host's, and the host's oldest is dropped. Links name a
// registration by its generation, so a parent may change tiers under its children.
// Host slots have ids [n_blocks, n_blocks + n_host_slots) in links. The copies are
// recorded in order as `KvBlockMove`s, which the workers run in that order before the
// next step's compute (`TakeMoves`).
//
// Thread safety: single owner (the scheduler's loop thread, through BlockAllocator).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace cascade::coordinator {

// A registered block as a chain element: where it is (a device block id, or a host slot
// as n_blocks + slot) and the generation of its registration (ids are reused after
// eviction; the generation, unique per registration, tells the registrations apart).
// The default link is the root, the parent of every chain's first block.
struct PrefixLink {
  int32_t block = -1;
  uint64_t generation = 0;
  bool operator==(const PrefixLink&) const = default;
};

// One copy between a device KV block and a host slot, on every worker holding KV.
struct KvBlockMove {
  bool to_host = false;  // true: block -> slot (an eviction); false: slot -> block (a hit).
  int32_t block = 0;     // Device block id.
  int32_t slot = 0;      // Host slot, [0, n_host_slots).
  int32_t lane = 0;      // The lane whose worker runs it (Scheduler's lanes; else 0).
  bool operator==(const KvBlockMove&) const = default;
};

class PrefixCache {
 public:
  // The chain hash of a block holding `tokens` after a parent chain hashed `parent_hash`.
  using HashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
  // FNV-1a over the parent hash and the token ids, then a 64-bit finaliser (splitmix64).
  static uint64_t ChainHash(uint64_t parent_hash, std::span<const int32_t> tokens);

  // An index over blocks [0, n_blocks) of `block_size` tokens, and `n_host_slots` host
  // slots. `hash` is a seam for tests (a weak hash forces collisions); exactness never
  // depends on it. REQUIRES n_blocks >= 0, block_size >= 1, n_host_slots >= 0.
  PrefixCache(int32_t n_blocks, int32_t block_size, HashFn hash = ChainHash, int32_t n_host_slots = 0);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  PrefixCache(PrefixCache&&) = default;
  PrefixCache& operator=(PrefixCache&&) = default;

  // The registered chain holding the first full blocks of `tokens`, longest first match
  // from the root, at most `max_blocks` long (fewer when `tokens` has fewer full blocks).
  // Marks nothing as used: the caller takes references on the blocks it keeps.
  std::vector<PrefixLink> Match(std::span<const int32_t> tokens, int32_t max_blocks) const;

  // Registers `block` as holding `tokens` (exactly block_size ids, their KV all computed)
  // after the chain ending at `parent` (the root, or a link from Match / Register).
  // Returns the link of the registered block with this content: `block`'s own, or that of
  // an identical block registered before (kept; `block` stays unregistered). nullopt
  // when `parent` is no longer registered (evicted since) or when another chain's block
  // holds this hash (a collision); nothing changes then. REQUIRES `block` unregistered.
  std::optional<PrefixLink> Register(PrefixLink parent, std::span<const int32_t> tokens, int32_t block);

  bool registered(int32_t block) const { return entries_[block].registered; }
  // Whether `link` is the root or a registration that still stands.
  bool Valid(PrefixLink link) const;

  // Cached-free blocks. `Park` puts a registered block no sequence holds at the most
  // recently used end; `Unpark` takes a parked block back (a hit revived it). REQUIRES a
  // registered block, not parked (Park) or parked (Unpark).
  void Park(int32_t block);
  void Unpark(int32_t block);
  // Takes the least recently parked block out of the device tier and returns it: its
  // registration moves to a host slot (a free one, else the host's least recently used
  // is dropped), or is dropped when there is no host tier. REQUIRES n_parked() > 0.
  int32_t EvictLru();
  // A hit in the host tier: `Pin` keeps the slot's registration from being dropped by the
  // evictions that make room for it (REQUIRES a host link, valid and not pinned);
  // `Onload` then moves it into `block` (a device block the caller holds, unregistered)
  // and points `link` there. Pin every host link of a chain before the first allocation.
  void Pin(PrefixLink link);
  void Onload(PrefixLink& link, int32_t block);
  // The copies recorded since the last call, in order.
  std::vector<KvBlockMove> TakeMoves() { return std::exchange(moves_, {}); }
  // Unregisters every block in both tiers and forgets the copies not yet taken (the
  // workers' KV is gone); returns the parked device blocks (plain free blocks now).
  std::vector<int32_t> Clear();

  bool on_host(int32_t id) const { return id >= n_blocks_; }
  int32_t n_parked() const { return static_cast<int32_t>(lru_.size()); }
  // Registrations in both tiers, and in the host tier.
  int32_t n_registered() const { return static_cast<int32_t>(index_.size()); }
  int32_t n_host_slots() const { return static_cast<int32_t>(entries_.size()) - n_blocks_; }
  int32_t n_on_host() const { return n_host_slots() - static_cast<int32_t>(host_free_.size()); }
  // Blocks copied to the host tier and back since construction.
  int64_t n_offloaded() const { return n_offloaded_; }
  int64_t n_onloaded() const { return n_onloaded_; }

 private:
  struct Entry {
    bool registered = false;
    bool parked = false;  // In `lru_` (a device block) or `host_lru_` (a host slot).
    uint64_t hash = 0;
    uint64_t generation = 0;
    uint64_t parent = 0;               // The parent's generation; 0: the root.
    std::vector<int32_t> tokens;       // [block_size] while registered.
    std::list<int32_t>::iterator lru;  // Its place in its tier's LRU while parked.
  };
  uint64_t HashOf(PrefixLink link) const;  // 0 for the root.
  void Unregister(int32_t id);
  // Moves the registration at `from` (parked or pinned) to the unregistered `to`.
  void Relocate(int32_t from, int32_t to);
  std::list<int32_t>& LruOf(int32_t id) { return on_host(id) ? host_lru_ : lru_; }

  int32_t block_size_;
  int32_t n_blocks_;
  HashFn hash_;
  std::vector<Entry> entries_;                    // [n_blocks + n_host_slots].
  absl::flat_hash_map<uint64_t, int32_t> index_;  // Chain hash -> where it is registered.
  std::list<int32_t> lru_;                        // Parked device blocks; the front is evicted first.
  std::list<int32_t> host_lru_;                   // Host slots holding a registration, oldest first.
  std::vector<int32_t> host_free_;                // Host slot ids free, the back taken next.
  std::vector<KvBlockMove> moves_;                // Recorded, not yet taken.
  int64_t n_offloaded_ = 0, n_onloaded_ = 0;
  uint64_t next_generation_ = 1;
};

}  // namespace cascade::coordinator

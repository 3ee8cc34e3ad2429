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
// Thread safety: single owner (the scheduler's loop thread, through BlockAllocator).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace cascade::coordinator {

// A registered block as a chain element: its id and the generation of its registration
// (a block id is reused after eviction; the generation tells the registrations apart).
// The default link is the root, the parent of every chain's first block.
struct PrefixLink {
  int32_t block = -1;
  uint64_t generation = 0;
  bool operator==(const PrefixLink&) const = default;
};

class PrefixCache {
 public:
  // The chain hash of a block holding `tokens` after a parent chain hashed `parent_hash`.
  using HashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
  // FNV-1a over the parent hash and the token ids, then a 64-bit finaliser (splitmix64).
  static uint64_t ChainHash(uint64_t parent_hash, std::span<const int32_t> tokens);

  // An index over blocks [0, n_blocks) of `block_size` tokens. `hash` is a seam for
  // tests (a weak hash forces collisions); exactness never depends on it.
  // REQUIRES n_blocks >= 0, block_size >= 1.
  PrefixCache(int32_t n_blocks, int32_t block_size, HashFn hash = ChainHash);
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
  // Unregisters the least recently parked block and returns it. REQUIRES n_parked() > 0.
  int32_t EvictLru();
  // Unregisters every block; returns the parked ones (they are plain free blocks now).
  std::vector<int32_t> Clear();

  int32_t n_parked() const { return static_cast<int32_t>(lru_.size()); }
  int32_t n_registered() const { return static_cast<int32_t>(index_.size()); }

 private:
  struct Entry {
    bool registered = false;
    bool parked = false;
    uint64_t hash = 0;
    uint64_t generation = 0;
    PrefixLink parent;
    std::vector<int32_t> tokens;       // [block_size] while registered.
    std::list<int32_t>::iterator lru;  // Its place in `lru_` while parked.
  };
  uint64_t HashOf(PrefixLink link) const;  // 0 for the root.
  void Unregister(int32_t block);

  int32_t block_size_;
  HashFn hash_;
  std::vector<Entry> entries_;                    // [n_blocks].
  absl::flat_hash_map<uint64_t, int32_t> index_;  // Chain hash -> registered block.
  std::list<int32_t> lru_;                        // Parked blocks; the front is evicted first.
  uint64_t next_generation_ = 1;
};

}  // namespace cascade::coordinator

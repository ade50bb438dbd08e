/// \file
/// \brief `nn::workspace`: the scratch memory a caller lends to the layers' `forward_into` calls, so that
/// a loop calling them over and over (a decode loop) makes no heap allocation once it has warmed up.
///
/// A workspace is a stack of bump-allocated regions. A layer opens a `workspace::frame`, takes the
/// buffers it needs with `take<T>(n)`, and gives them all back when the frame closes. Memory comes in
/// blocks that never move while a frame is open (a buffer taken earlier stays valid when a later one
/// needs a new block); when the outermost frame closes after more than one block was used, the blocks
/// are replaced by one block of the largest size used so far. So the first pass of a loop allocates (and
/// merges as it ends), and every later pass with the same shapes allocates nothing — the pattern of
/// PyTorch's caching allocator and ggml's compute buffers, made explicit.
///
/// A workspace made with `workspace::per_call` instead allocates each buffer on its own, exactly sized,
/// and never merges: what the value-returning calls use for their one call (the allocations they made
/// before workspaces existed, no more).
///
/// Not thread-safe: one workspace per thread (a layer called from several threads gets one each).
/// Copying gives an empty workspace (scratch contents mean nothing between calls).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace mixprec::nn {

/// Scratch memory for `forward_into` calls (see the file comment). Every buffer is aligned to
/// `workspace::alignment` bytes (a cache line, and the widest SIMD register) and uninitialised.
///
/// **Example**:
///
///     mixprec::nn::workspace ws;
///     for (int token : tokens) {
///       ffn.forward_into(y, x, ws);    // the first call allocates its scratch, later calls reuse it
///     }
class workspace {
 public:
  /// Alignment of every buffer, in bytes.
  static constexpr std::size_t alignment = 64;

  /// The tag of the one-call form (see the file comment).
  struct per_call_t {
    explicit per_call_t() = default;
  };
  /// Selects the one-call form: `workspace ws{workspace::per_call};`.
  static constexpr per_call_t per_call{};

  /// An empty workspace: no memory until the first `take`.
  workspace() = default;
  /// A workspace holding one block of at least `bytes` bytes from the start.
  explicit workspace(std::size_t bytes) {
    if (bytes > 0) add_block(bytes);
  }
  /// The one-call form: every `take` gets a block of its own, exactly sized; blocks are never merged.
  explicit workspace(per_call_t /*tag*/) : per_call_(true) { blocks_.reserve(8); }
  /// An empty workspace (of the same form): scratch is not copied.
  workspace(const workspace& other) : per_call_(other.per_call_) {}
  /// Keeps this workspace's own memory: scratch is not copied.
  workspace& operator=(const workspace& /*other*/) noexcept { return *this; }
  /// Hands the blocks over; `other` is left empty. Not while a frame of either workspace is open.
  workspace(workspace&& other) noexcept
      : blocks_(std::move(other.blocks_)),
        block_(std::exchange(other.block_, 0)),
        used_(std::exchange(other.used_, 0)),
        below_(std::exchange(other.below_, 0)),
        high_water_(std::exchange(other.high_water_, 0)),
        depth_(std::exchange(other.depth_, 0)),
        per_call_(other.per_call_) {
    other.blocks_.clear();
  }
  /// Hands the blocks over; `other` is left empty. Not while a frame of either workspace is open.
  workspace& operator=(workspace&& other) noexcept {
    if (this != &other) {
      blocks_ = std::move(other.blocks_);
      other.blocks_.clear();
      block_ = std::exchange(other.block_, 0);
      used_ = std::exchange(other.used_, 0);
      below_ = std::exchange(other.below_, 0);
      high_water_ = std::exchange(other.high_water_, 0);
      depth_ = std::exchange(other.depth_, 0);
      per_call_ = other.per_call_;
    }
    return *this;
  }
  ~workspace() = default;

  /// The scope of a layer's buffers: every buffer taken while the frame is open is given back when it
  /// closes (frames nest: a layer calling another opens one inside its own).
  class frame {
   public:
    /// Opens a frame of `ws`.
    explicit frame(workspace& ws) noexcept : ws_(ws), block_(ws.block_), used_(ws.used_), below_(ws.below_) {
      ++ws.depth_;
    }
    frame(const frame&) = delete;
    frame& operator=(const frame&) = delete;
    frame(frame&&) = delete;
    frame& operator=(frame&&) = delete;
    /// Gives back the frame's buffers; the outermost frame merges the blocks into one if there are several.
    ~frame() {
      ws_.block_ = block_;
      ws_.used_ = used_;
      ws_.below_ = below_;
      if (--ws_.depth_ == 0) ws_.merge();
    }

   private:
    workspace& ws_;
    std::size_t block_;
    std::size_t used_;
    std::size_t below_;
  };

  /// `n` uninitialised values of T, aligned to `alignment`, valid until the innermost open frame
  /// closes. T must be trivially copyable and destructible (numbers, small structs of numbers).
  /// \throws std::logic_error when no frame is open; std::bad_alloc (or std::length_error for a size
  ///   beyond the address space) when a block cannot be allocated.
  template <class T>
  [[nodiscard]] std::span<T> take(std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                  "nn::workspace::take<T>: T must be trivially copyable and destructible (numbers or plain "
                  "structs of numbers); keep other objects in ordinary containers.");
    static_assert(alignof(T) <= alignment, "nn::workspace::take<T>: T needs more alignment than a workspace gives.");
    if (depth_ == 0) {
      throw std::logic_error("nn::workspace::take: no frame is open; open a workspace::frame first");
    }
    if (n > max_bytes / sizeof(T)) {
      throw std::length_error("nn::workspace::take: the request exceeds the address space");
    }
    if (n == 0) return {};
    const std::size_t bytes = n * sizeof(T);
    std::size_t offset = round_up(used_);
    if (blocks_.empty() || bytes > blocks_[block_].size - std::min(offset, blocks_[block_].size)) {
      next_block(bytes);
      offset = 0;
    }
    used_ = offset + bytes;
    high_water_ = std::max(high_water_, below_ + used_);
    T* p = reinterpret_cast<T*>(blocks_[block_].data.get() + offset);
    std::uninitialized_default_construct_n(p, n);  // begins the values' lifetimes; no code for trivial T
    return {p, n};
  }

  /// Bytes held (all blocks).
  [[nodiscard]] std::size_t capacity() const noexcept {
    std::size_t total = 0;
    for (const auto& b : blocks_) total += b.size;
    return total;
  }
  /// The largest number of bytes in use at once so far, counting alignment padding and the unused ends
  /// of blocks that were full (the size a merged block gets).
  [[nodiscard]] std::size_t high_water() const noexcept { return high_water_; }
  /// Number of blocks held (1 once a loop has warmed up).
  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_.size(); }

 private:
  static constexpr std::size_t max_bytes = std::size_t(-1) / 2;
  static constexpr std::size_t min_block = 4096;

  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{alignment}); }
  };
  struct block {
    std::unique_ptr<std::byte[], aligned_delete> data;
    std::size_t size = 0;  // a multiple of alignment
  };

  static constexpr std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + alignment - 1) / alignment * alignment;
  }

  block make_block(std::size_t bytes) const {
    const std::size_t size = round_up(per_call_ ? bytes : std::max(bytes, min_block));
    return block{std::unique_ptr<std::byte[], aligned_delete>(
                     static_cast<std::byte*>(::operator new[](size, std::align_val_t{alignment}))),
                 size};
  }

  void add_block(std::size_t bytes) { blocks_.push_back(make_block(bytes)); }

  /// Moves to an unused block of at least `bytes` bytes after the current one (blocks after the current
  /// one are free while frames are open: frames close in order).
  void next_block(std::size_t bytes) {
    const bool have_current = !blocks_.empty();
    const std::size_t next = have_current ? block_ + 1 : 0;
    if (next < blocks_.size() && blocks_[next].size >= bytes) {
      below_ += have_current ? blocks_[block_].size : 0;
      block_ = next;
      used_ = 0;
      return;
    }
    // A new block, at least doubling what is held (exactly `bytes` in the one-call form), in place of a
    // free one that is too small (blocks after the current one are free).
    block b = make_block(per_call_ ? bytes : std::max(bytes, capacity()));
    if (next < blocks_.size()) {
      blocks_[next] = std::move(b);
    } else {
      blocks_.push_back(std::move(b));
    }
    below_ += have_current ? blocks_[block_].size : 0;
    block_ = next;
    used_ = 0;
  }

  /// With no frame open: one block of the high-water size replaces several. If that block cannot be
  /// allocated the blocks stay as they are (still correct, only not merged).
  void merge() noexcept {
    block_ = 0;
    used_ = 0;
    below_ = 0;
    if (blocks_.size() <= 1 || per_call_) return;
    // Holds the old blocks and the new one at once for a moment (twice the memory, once).
    try {
      block merged = make_block(high_water_);
      blocks_.clear();
      blocks_.push_back(std::move(merged));  // the vector keeps its capacity: no allocation here
    } catch (const std::bad_alloc&) {
    }
  }

  std::vector<block> blocks_;
  std::size_t block_ = 0;       // the block being filled
  std::size_t used_ = 0;        // bytes used in it
  std::size_t below_ = 0;       // bytes of the blocks before it
  std::size_t high_water_ = 0;  // largest below_ + used_ seen
  std::size_t depth_ = 0;       // open frames
  bool per_call_ = false;       // the one-call form
};

}  // namespace mixprec::nn

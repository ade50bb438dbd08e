/// \file
/// \brief The JSON halves of the safetensors reader and writer (`mixprec::detail::st_write_header`,
/// `st_read_header`, declared in train/safetensors.hpp), on nlohmann-json. Included by
/// train/safetensors.hpp in header-only translation units (inline definitions), and compiled once into
/// `mixprec::compiled` by src/checkpoints.cpp, which defines MIXPREC_CHECKPOINT_DEFINITIONS. Do not
/// include it yourself.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/train/safetensors.hpp"

/// `inline` in header-only translation units; nothing in the library's one definition.
#ifdef MIXPREC_CHECKPOINT_DEFINITIONS
#define MIXPREC_CHECKPOINT_INLINE
#else
#define MIXPREC_CHECKPOINT_INLINE inline
#endif

namespace mixprec::detail {

/// Throws the reader's error: "safetensors: <source>: <what>".
[[noreturn]] MIXPREC_CHECKPOINT_INLINE void st_header_fail(const std::string& source, const std::string& what) {
  throw train::safetensors_error(st_prefix(source) + what);
}

MIXPREC_CHECKPOINT_INLINE std::string st_write_header(std::span<const st_entry> entries,
                                                      const std::map<std::string, std::string>& metadata,
                                                      const std::string& source) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  for (const st_entry& e : entries) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(e.info.name);
    entry["shape"] = e.shape;
    entry["data_offsets"] = {e.begin, e.end};
    header[e.name] = std::move(entry);
  }
  try {
    return header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw train::safetensors_error(
        st_prefix(source) + "cannot write the header (a name or metadata string is not valid UTF-8?): " + e.what());
  }
}

MIXPREC_CHECKPOINT_INLINE void st_read_header(const char* text, std::size_t n, const std::string& source,
                                              std::vector<st_entry>& entries,
                                              std::map<std::string, std::string>& metadata) {
  // nlohmann keeps the last of two equal keys; this callback records the first repeated key instead.
  std::vector<std::pair<std::vector<std::string>, std::string>> open;  // keys seen, owner key, per object
  std::string last_key;
  std::optional<std::string> duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    if (event == event_t::object_start) {
      open.emplace_back(std::vector<std::string>{}, open.empty() ? std::string{} : last_key);
    } else if (event == event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == event_t::key && !open.empty()) {
      last_key = parsed.get<std::string>();
      auto& seen = open.back().first;
      if (std::find(seen.begin(), seen.end(), last_key) != seen.end()) {
        if (!duplicate)
          duplicate = open.size() == 1
                          ? "duplicate key \"" + last_key + "\" in the header"
                          : "duplicate key \"" + last_key + "\" in the entry of \"" + open.back().second + "\"";
      } else {
        seen.push_back(last_key);
      }
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + n, callback);
  } catch (const nlohmann::json::exception& e) {
    st_header_fail(source, std::string("the header is not valid JSON: ") + e.what());
  }
  if (duplicate) st_header_fail(source, *duplicate);
  if (!header.is_object()) st_header_fail(source, "the header is not a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) st_header_fail(source, "\"__metadata__\" is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) st_header_fail(source, "\"__metadata__\" value of \"" + mk + "\" is not a string");
        metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = st_quote(key) + ": ";
    if (!value.is_object()) st_header_fail(source, where + "the entry is not an object");
    const auto dt = value.find("dtype");
    if (dt == value.end()) st_header_fail(source, where + "missing \"dtype\"");
    if (!dt->is_string()) st_header_fail(source, where + "\"dtype\" is not a string");
    const auto info = train::find_safetensors_dtype(std::string_view(dt->get_ref<const std::string&>()));
    if (!info) st_header_fail(source, where + "unknown dtype \"" + dt->get<std::string>() + "\"");
    const auto sh = value.find("shape");
    if (sh == value.end()) st_header_fail(source, where + "missing \"shape\"");
    if (!sh->is_array()) st_header_fail(source, where + "\"shape\" is not an array");
    std::vector<std::uint64_t> shape;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        st_header_fail(source, where + "\"shape\" holds " + d.dump() + ", not a non-negative integer");
      shape.push_back(d.get<std::uint64_t>());
    }
    const auto off = value.find("data_offsets");
    if (off == value.end()) st_header_fail(source, where + "missing \"data_offsets\"");
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      st_header_fail(source, where + "\"data_offsets\" is " + off->dump() + ", not two non-negative integers");
    const auto begin = (*off)[0].get<std::uint64_t>();
    const auto end = (*off)[1].get<std::uint64_t>();
    if (end < begin)
      st_header_fail(
          source, where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") end before begin");
    entries.push_back({key, *info, std::move(shape), begin, end});
  }
}

}  // namespace mixprec::detail

#undef MIXPREC_CHECKPOINT_INLINE

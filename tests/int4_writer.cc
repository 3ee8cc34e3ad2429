#include "tests/int4_writer.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"

namespace cascade::testing {
namespace {

std::vector<uint16_t> ScalesByGroup(const QuantMatrix& m) {  // [n_groups, n_out]
  std::vector<uint16_t> s(m.n_groups() * m.n_out);
  for (int64_t o = 0; o < m.n_out; ++o)
    for (int64_t g = 0; g < m.n_groups(); ++g) s[g * m.n_out + o] = m.s[o * m.n_groups() + g];
  return s;
}

}  // namespace

double QuantMatrix::Value(int64_t o, int64_t i) const {
  const int64_t g = o * n_groups() + i / group;
  return static_cast<double>(F16ToF32(s[g])) * (static_cast<int>(q[o * n_in + i]) - static_cast<int>(z[g]));
}

QuantMatrix RandomQuant(int64_t n_out, int64_t n_in, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantMatrix m;
  m.n_out = n_out, m.n_in = n_in, m.group = group;
  for (int64_t i = 0; i < n_out * n_in; ++i) m.q.push_back(static_cast<uint8_t>(rng() % 16));
  for (int64_t i = 0; i < n_out * m.n_groups(); ++i) {
    m.z.push_back(static_cast<uint8_t>(1 + rng() % 15));  // GPTQ v1 cannot store a zero of 0 (below).
    m.s.push_back(F32ToF16(0.001f * static_cast<float>(1 + rng() % 97)));
  }
  return m;
}

// Round-to-nearest over each group's range (GPTQ's RTN baseline).
QuantMatrix Rtn(const float* w, int64_t n_out, int64_t n_in, int64_t group) {
  QuantMatrix m;
  m.n_out = n_out, m.n_in = n_in, m.group = group;
  m.q.resize(n_out * n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t g = 0; g < n_in / group; ++g) {
      const float* x = w + o * n_in + g * group;
      float lo = 0, hi = 0;
      for (int64_t i = 0; i < group; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      const uint16_t s = F32ToF16(std::max((hi - lo) / 15.0f, 1e-6f));
      const float d = F16ToF32(s);
      const int z = std::clamp(static_cast<int>(std::lround(-lo / d)), 1, 15);  // 1: see PackGptq.
      m.s.push_back(s);
      m.z.push_back(static_cast<uint8_t>(z));
      for (int64_t i = 0; i < group; ++i) {
        m.q[o * n_in + g * group + i] =
            static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(x[i] / d)) + z, 0, 15));
      }
    }
  }
  return m;
}

// AutoGPTQ: qweight[r, o] packs inputs 8 r + k of output o in nibble k; qzeros[g, c]
// packs outputs 8 c + k in nibble k, as zero - 1 in the v1 format (so a zero of 0 would
// be stored as 15 and read back as 16, by AutoGPTQ and by Cascade alike: the v1 flaw that
// gptq_v2 fixed; the matrices here keep zeros in 1..15).
std::vector<SafetensorsEntry> PackGptq(const std::string& p, const QuantMatrix& m, bool v1) {
  std::vector<int32_t> qw(m.n_in / 8 * m.n_out), qz(m.n_groups() * m.n_out / 8), g_idx(m.n_in);
  for (int64_t r = 0; r < m.n_in / 8; ++r)
    for (int64_t o = 0; o < m.n_out; ++o) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<uint32_t>(m.q[o * m.n_in + 8 * r + k]) << (4 * k);
      qw[r * m.n_out + o] = static_cast<int32_t>(word);
    }
  for (int64_t g = 0; g < m.n_groups(); ++g)
    for (int64_t c = 0; c < m.n_out / 8; ++c) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) {
        const int z = m.z[(8 * c + k) * m.n_groups() + g] - (v1 ? 1 : 0);
        word |= static_cast<uint32_t>(z & 0xf) << (4 * k);
      }
      qz[g * (m.n_out / 8) + c] = static_cast<int32_t>(word);
    }
  for (int64_t i = 0; i < m.n_in; ++i) g_idx[i] = static_cast<int32_t>(i / m.group);
  return {{p + ".qweight", "I32", {m.n_in / 8, m.n_out}, RawBytes(qw)},
          {p + ".qzeros", "I32", {m.n_groups(), m.n_out / 8}, RawBytes(qz)},
          {p + ".g_idx", "I32", {m.n_in}, RawBytes(g_idx)},
          {p + ".scales", "F16", {m.n_groups(), m.n_out}, RawBytes(ScalesByGroup(m))}};
}

ActOrderGptq PackActOrderGptq(const std::string& p, const float* w, int64_t n_out, int64_t n_in, int64_t group,
                              const std::vector<int64_t>& perm) {
  std::vector<int64_t> slot(n_in);  // Input i is column slot[i] of the sorted matrix.
  for (int64_t j = 0; j < n_in; ++j) slot[perm[j]] = j;
  std::vector<float> sorted(n_out * n_in);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t j = 0; j < n_in; ++j) sorted[o * n_in + j] = w[o * n_in + perm[j]];
  const QuantMatrix ms = Rtn(sorted.data(), n_out, n_in, group);
  QuantMatrix file = ms;  // The same groups' scales and zeros, quants in the file's order.
  std::vector<int32_t> g_idx(n_in);
  ActOrderGptq out;
  out.decoded.resize(n_out * n_in);
  for (int64_t i = 0; i < n_in; ++i) {
    g_idx[i] = static_cast<int32_t>(slot[i] / group);
    for (int64_t o = 0; o < n_out; ++o) {
      file.q[o * n_in + i] = ms.q[o * n_in + slot[i]];
      out.decoded[o * n_in + i] = static_cast<float>(ms.Value(o, slot[i]));
    }
  }
  out.entries = PackGptq(p, file, true);
  for (SafetensorsEntry& e : out.entries) {
    if (e.name == p + ".g_idx") e.data = RawBytes(g_idx);
  }
  return out;
}

// AutoAWQ (gemm): qweight[i, c] packs input i of outputs 8 c + kOrder[k] in nibble k;
// qzeros[g, c] the zeros in the same order.
std::vector<SafetensorsEntry> PackAwq(const std::string& p, const QuantMatrix& m) {
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int32_t> qw(m.n_in * m.n_out / 8), qz(m.n_groups() * m.n_out / 8);
  for (int64_t i = 0; i < m.n_in; ++i)
    for (int64_t c = 0; c < m.n_out / 8; ++c) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<uint32_t>(m.q[(8 * c + kOrder[k]) * m.n_in + i]) << (4 * k);
      qw[i * (m.n_out / 8) + c] = static_cast<int32_t>(word);
    }
  for (int64_t g = 0; g < m.n_groups(); ++g)
    for (int64_t c = 0; c < m.n_out / 8; ++c) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<uint32_t>(m.z[(8 * c + kOrder[k]) * m.n_groups() + g]) << (4 * k);
      qz[g * (m.n_out / 8) + c] = static_cast<int32_t>(word);
    }
  return {{p + ".qweight", "I32", {m.n_in, m.n_out / 8}, RawBytes(qw)},
          {p + ".qzeros", "I32", {m.n_groups(), m.n_out / 8}, RawBytes(qz)},
          {p + ".scales", "F16", {m.n_groups(), m.n_out}, RawBytes(ScalesByGroup(m))}};
}

nlohmann::json GptqConfig(int64_t group, bool v1) {
  return {{"quant_method", "gptq"}, {"bits", 4},    {"group_size", group},
          {"desc_act", false},      {"sym", false}, {"checkpoint_format", v1 ? "gptq" : "gptq_v2"}};
}
nlohmann::json AwqConfig(int64_t group) {
  return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", group}, {"zero_point", true}, {"version", "gemm"}};
}

}  // namespace cascade::testing

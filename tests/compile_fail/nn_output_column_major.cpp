// Must not compile: forward_into into a column-major Eigen matrix, which cannot hold the rows in place,
// stops at one static_assert sentence in mixprec/arrays/row_major.hpp naming the outputs accepted. The
// twin writes into a RowMajor Eigen::Map, and compiles.
#include <Eigen/Core>
#include <xtensor/xtensor.hpp>

#include <mixprec/nn/dense.hpp>

inline void project(const mixprec::nn::dense<mixprec::policy<float>>& layer, const xt::xtensor<float, 2>& x,
                    float* buffer) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  Eigen::Map<Eigen::MatrixXf> out(buffer, 3, 4);
#else
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> out(buffer, 3, 4);
#endif
  layer.forward_into(out, x);
}

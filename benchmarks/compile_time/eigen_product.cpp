// Compile-time benchmark: a user's TU with one Eigen dense float product (the peer a mixprec layer TU
// is measured against).
#include <Eigen/Dense>

int main() {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(64, 32);
  Eigen::MatrixXf b = Eigen::MatrixXf::Random(32, 16);
  Eigen::MatrixXf c = a * b;
  return c.rows() == 64 ? 0 : 1;
}

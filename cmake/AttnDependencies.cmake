# Finds attn's dependencies: all from Debian packages (scripts/install-deps.sh); nothing is downloaded.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(MPI QUIET COMPONENTS CXX)

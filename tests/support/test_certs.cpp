#include "tests/support/test_certs.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace outbound::testing {

namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

// Runs argv[0] (a full path) with stdout and stderr sent to `log`; throws
// with the command line and its output if it does not exit with 0. No shell:
// temp paths may contain anything.
void run(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  auto rc
    = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  std::string cmd;
  for (auto& a : argv)
    cmd += (cmd.empty() ? "" : " ") + a;
  if (rc != 0)
    throw std::runtime_error("cannot start '" + cmd
                             + "': " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("'" + cmd + "' failed:\n" + read_all(log));
}

const std::string& openssl_path() {
  static const std::string path
    = find_program("openssl", "OUTBOUND_OPENSSL", {"/usr/bin/openssl"});
  if (path.empty())
    throw std::runtime_error("the openssl command line tool was not found "
                             "(install the Debian package 'openssl')");
  return path;
}

// A minimal config of our own, so neither /etc/ssl/openssl.cnf nor
// $OPENSSL_CONF can add or duplicate extensions.
std::string req_config(const std::string& common_name) {
  return "[req]\n"
         "prompt = no\n"
         "distinguished_name = dn\n"
         "[dn]\n"
         "CN = "
         + common_name
         + "\n"
           "[v3_ca]\n"
           "basicConstraints = critical,CA:TRUE\n"
           "keyUsage = critical,keyCertSign,cRLSign\n"
           "subjectKeyIdentifier = hash\n";
}

} // namespace

temp_dir::temp_dir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl
    = std::string{base && *base ? base : "/tmp"} + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw std::runtime_error("mkdtemp(" + tmpl
                             + ") failed: " + std::strerror(errno));
  path_ = fs::absolute(buf.data()).string();
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

cert_files make_ca(const std::string& dir, const std::string& name,
                   const std::string& common_name) {
  cert_files out{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  auto cnf = dir + "/" + name + ".cnf";
  write_file(cnf, req_config(common_name));
  run({openssl_path(), "req", "-config", cnf, "-x509", "-newkey", "ec",
       "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-sha256", "-days",
       "2", "-extensions", "v3_ca", "-keyout", out.key, "-out", out.cert},
      dir + "/" + name + ".log");
  return out;
}

cert_files make_leaf(const std::string& dir, const std::string& name,
                     const cert_files& ca, const std::string& common_name,
                     const std::vector<std::string>& sans, cert_usage usage) {
  cert_files out{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  auto cnf = dir + "/" + name + ".cnf";
  auto ext = dir + "/" + name + ".ext";
  auto csr = dir + "/" + name + ".csr";
  auto log = dir + "/" + name + ".log";
  write_file(cnf, req_config(common_name));
  std::string e = "[leaf]\n"
                  "basicConstraints = critical,CA:FALSE\n"
                  "keyUsage = critical,digitalSignature,keyAgreement\n"
                  "extendedKeyUsage = ";
  e += usage == cert_usage::server ? "serverAuth\n" : "clientAuth\n";
  e += "subjectKeyIdentifier = hash\n"
       "authorityKeyIdentifier = keyid\n";
  if (!sans.empty()) {
    e += "subjectAltName = ";
    for (size_t i = 0; i < sans.size(); ++i)
      e += (i ? "," : "") + sans[i];
    e += "\n";
  }
  write_file(ext, e);
  run({openssl_path(), "req", "-config", cnf, "-new", "-newkey", "ec",
       "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-sha256",
       "-keyout", out.key, "-out", csr},
      log);
  // A serial from the name keeps every certificate of one run distinct
  // without a shared .srl file.
  unsigned long serial = 1000;
  for (unsigned char c : name)
    serial = serial * 31 + c;
  run({openssl_path(),
       "x509",
       "-req",
       "-in",
       csr,
       "-CA",
       ca.cert,
       "-CAkey",
       ca.key,
       "-set_serial",
       std::to_string(serial % 1000000007ul),
       "-sha256",
       "-days",
       "2",
       "-extfile",
       ext,
       "-extensions",
       "leaf",
       "-out",
       out.cert},
      log);
  return out;
}

test_pki test_pki::generate(const std::string& dir) {
  test_pki p;
  p.ca_a = make_ca(dir, "caA", "outbound test CA A");
  p.server = make_leaf(dir, "server", p.ca_a, "localhost",
                       {"DNS:localhost", "IP:127.0.0.1"}, cert_usage::server);
  p.server_dns = make_leaf(dir, "server_dns", p.ca_a, "localhost",
                           {"DNS:localhost"}, cert_usage::server);
  p.client = make_leaf(dir, "client", p.ca_a, "outbound-test-client", {},
                       cert_usage::client);
  p.ca_b = make_ca(dir, "caB", "outbound test CA B (foreign)");
  p.foreign_client = make_leaf(dir, "foreign_client", p.ca_b, "foreign-client",
                               {}, cert_usage::client);
  return p;
}

std::string find_program(const std::string& name, const std::string& env_var,
                         const std::vector<std::string>& fallbacks) {
  auto executable = [](const std::string& p) {
    return !p.empty() && ::access(p.c_str(), X_OK) == 0
           && fs::is_regular_file(p);
  };
  if (const char* v = std::getenv(env_var.c_str()); v && *v)
    return executable(v) ? std::string{v} : std::string{};
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in{path};
    std::string d;
    while (std::getline(in, d, ':'))
      if (!d.empty() && executable(d + "/" + name))
        return d + "/" + name;
  }
  for (auto& f : fallbacks)
    if (executable(f))
      return f;
  return {};
}

} // namespace outbound::testing

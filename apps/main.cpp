// Placeholder entry point; the CLI (apps/request_cmd.cpp) replaces it.
int main() {
  return 0;
}

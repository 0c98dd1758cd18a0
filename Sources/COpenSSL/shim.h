#ifndef STOREBACKUP_COPENSSL_SHIM_H
#define STOREBACKUP_COPENSSL_SHIM_H
// OpenSSL's libcrypto, for what WinZip AES needs: the AES block function (AES-NI) and SHA-1.
// The low-level SHA1_* calls are deprecated in OpenSSL 3 but kept: PBKDF2 needs to copy a
// hash state 2000 times per key, which the EVP interface makes several times slower.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#endif

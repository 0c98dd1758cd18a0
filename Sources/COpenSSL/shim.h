#ifndef STOREBACKUP_COPENSSL_SHIM_H
#define STOREBACKUP_COPENSSL_SHIM_H
// OpenSSL's libcrypto, for the AES block function (AES-NI) and PBKDF2 that WinZip AES needs.
#include <openssl/evp.h>
#include <openssl/rand.h>
#endif
